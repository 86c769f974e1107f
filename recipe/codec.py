"""The codec's public face: request body → `ConversationRequest` → prompt → token ids.

    from recipe.codec import ConversionOptions, convert, render, encode
    req = convert("chat", body, ConversionOptions())        # raises recipe.errors.RequestError
    rendered = render(req)                                    # RenderedPrompt(prompt, special_ranges, ...)
    ids = encode(req, tokenizer)                              # recipe.tokenizer.Tokenizer

Conversion equals the official deepseek-recipe 0.2.0 (golden vectors in golden/), except where Recipe
goes beyond it, documented in `recipe.protocols`: Chat `n` up to `ConversionOptions.max_n`, penalties
propagated, `stream_options.include_usage` and Responses `previous_response_id` kept; and, unless
`ConversionOptions(strict_reference=True)`, what real clients send that the reference rejects or ignores
(`recipe.protocols.leniency`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from recipe.conversation import Conversation, ConversationRequest, ModelVersion
from recipe.errors import RequestError, conversion_error
from recipe.protocols.options import ConversionOptions
from recipe.render_memo import RenderMemo

if TYPE_CHECKING:
    from recipe.codecs.rendered import RenderedPrompt
    from recipe.tokenizer import Tokenizer

Api = Literal["chat", "messages", "responses"]
APIS: tuple[str, ...] = ("chat", "messages", "responses")

_DEFAULT_OPTIONS = ConversionOptions()
# `render` then `encode` of one request renders once (off switch: `RenderMemo.enabled = False`)
_RENDERED = RenderMemo()

__all__ = [
    "APIS",
    "ConversionOptions",
    "RequestError",
    "convert",
    "encode",
    "parse",
    "render",
    "resolve_max_tokens",
]


def _protocol(api: str) -> Any:
    if api == "chat":
        from recipe.protocols import chat

        return chat
    if api == "messages":
        from recipe.protocols import messages

        return messages
    if api == "responses":
        from recipe.protocols import responses

        return responses
    raise ValueError(f"unknown api {api!r}; expected one of {', '.join(APIS)}")


def parse(api: str, body: bytes | str | dict[str, Any], options: ConversionOptions | None = None) -> dict[str, Any]:
    """Decode and shape-check a body (parse errors only); `convert` does this first."""
    lenient = not (options or _DEFAULT_OPTIONS).strict_reference
    return _protocol(api).parse(body, lenient=lenient)  # type: ignore[no-any-return]


def convert(
    api: str, body: bytes | str | dict[str, Any], options: ConversionOptions | None = None
) -> ConversationRequest:
    """Convert one request body of `api` ("chat", "messages" or "responses").

    Raises `RequestError` (status, message, kind "parse" or "conversion") for any body the reference
    rejects; never another exception for bad input.
    """
    proto = _protocol(api)
    options = options or _DEFAULT_OPTIONS
    try:
        obj = proto.parse(body, lenient=not options.strict_reference)
        return proto.convert(obj, options)  # type: ignore[no-any-return]
    except RequestError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, RecursionError) as exc:
        # A body shape the readers did not anticipate: still a clear 400, never a traceback.
        raise RequestError(f"invalid request body: {type(exc).__name__}: {exc}", kind="parse") from exc


def default_max_tokens(request: ConversationRequest) -> int:
    """The max_tokens of a request that set none: 8192 (thinking off), 131072 (effort max), 65536."""
    conv = request.conversation
    if not conv.thinking_mode:
        return 8192
    return 131072 if conv.reasoning_effort == "max" else 65536


def resolve_max_tokens(
    request: ConversationRequest, prompt_tokens: int, context_limit: int, *, clamp_to_context: bool = False
) -> int:
    """The max_tokens to send to the backend for a prompt of `prompt_tokens` tokens.

    A requested value is kept, an unset one defaults (`default_max_tokens`); the result is lowered
    to the context left and raised to at least 1. Raises `RequestError` (400) when the prompt plus the
    requested completion (or, unrequested, the prompt alone) exceeds `context_limit`; with
    `clamp_to_context` only a prompt that leaves no room is rejected, and a larger request is lowered to
    the room left (clients such as Claude Code ask for their own model's output limit, 32,000 tokens).
    """
    requested = request.inference_options.max_tokens
    asked = requested or 0
    too_long = prompt_tokens >= context_limit if clamp_to_context else prompt_tokens > context_limit
    if (requested is not None and prompt_tokens + requested > context_limit and not clamp_to_context) or too_long:
        raise conversion_error(
            f"This model's maximum context length is {context_limit} tokens. However, you requested "
            f"{prompt_tokens + asked} tokens ({prompt_tokens} in the messages, {asked} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    value = requested if requested is not None else default_max_tokens(request)
    return max(1, min(value, context_limit - prompt_tokens))


def _codec_module(version: ModelVersion) -> Any:
    if version is ModelVersion.V4:
        from recipe.codecs import deepseek_v4

        return deepseek_v4
    from recipe.codecs import deepseek_v41

    return deepseek_v41


def render(request: ConversationRequest | Conversation, version: ModelVersion | None = None) -> RenderedPrompt:
    """Render a converted request (its own version) or a bare conversation (`version` required).

    The same (frozen, never mutated) object rendered again shortly after gets the same `RenderedPrompt`
    back without rendering (`recipe.render_memo`).
    """
    if isinstance(request, ConversationRequest):
        conversation = request.conversation
        version = version or request.model_version
    else:
        conversation = request
        if version is None:
            raise ValueError("render(conversation) needs the model version")
    rendered: RenderedPrompt | None = _RENDERED.get(conversation, version)
    if rendered is None:
        rendered = _codec_module(version).render(conversation)
        _RENDERED.put(conversation, version, rendered)
    return rendered


def encode(request: ConversationRequest, tokenizer: Tokenizer) -> list[int]:
    """Token ids of a converted request's prompt (special spans one id each, text as plain text)."""
    from recipe.encoding import encode_rendered

    return encode_rendered(render(request), tokenizer)  # type: ignore[no-any-return]
