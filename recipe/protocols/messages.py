"""Anthropic Messages request bodies → `ConversationRequest` (codec-spec §1, Messages rows).

Validation order as the reference's: model → server tools → messages → tool uniqueness → stop →
temperature → top_p → max_tokens. `max_tokens` is optional; above the bound it is clamped, not
rejected. A trailing assistant message is a closed turn, not a prefill.
"""

from __future__ import annotations

from typing import Any, NoReturn

from recipe.conversation import (
    Conversation,
    ConversationRequest,
    ImageSource,
    InferenceOptions,
    Message,
    ModelVersion,
    ToolCall,
)
from recipe.errors import conversion_error
from recipe.protocols import body_fields as bf
from recipe.protocols import leniency, sampling
from recipe.protocols.assemble import build_request, resolve_model, response_constraint, settle_reasoning
from recipe.protocols.images import UNSUPPORTED_IMAGE, join_parts, source_base64_ok, url_scheme
from recipe.protocols.options import ConversionOptions
from recipe.protocols.prompt_json import dumps as prompt_json
from recipe.protocols.tools import (
    ToolSpec,
    check_name,
    finish_tools,
    tool_constraint,
    validate_schema_document,
)

ROLES = ("user", "assistant", "system")
BLOCK_TYPES = (
    "text",
    "image",
    "document",
    "thinking",
    "server_tool_use",
    "tool_use",
    "tool_result",
    "web_search_tool_result",
    "tool_addition",
)
MEDIA_TYPES = ("image/jpeg", "image/jpg", "image/png", "image/gif", "image/webp")
SOURCE_TYPES = ("base64", "url", "file")
RESULT_BLOCK_TYPES = ("text", "image", "document", "tool_reference")
CHOICE_TYPES = ("auto", "any", "tool", "none")
STRUCT = "MessagesRequest"
STRUCT_FIELDS = 13
WEB_SEARCH_TYPES = ("web_search_20250305", "web_search_20260209")

# ----------------------------------------------------------------------------------------------------
# Shape
# ----------------------------------------------------------------------------------------------------


def _image_source(value: Any) -> None:
    src = bf.tagged_object(value, "MessagesImageSource")
    kind = bf.tag(src, "type", SOURCE_TYPES, "MessagesImageSource")
    if kind == "base64":
        for k, v in src.items():
            if k == "media_type":
                bf.unit_variant(v, MEDIA_TYPES)
            elif k == "data":
                bf.string(v)
        for req in ("media_type", "data"):
            if req not in src:
                bf.missing(req)
    elif kind == "url":
        if "url" not in src:
            bf.missing("url")
        bf.string(src["url"])
    else:
        if "file_id" not in src:
            bf.missing("file_id")
        bf.string(src["file_id"])


def _block(value: Any, nested: bool = False) -> dict[str, Any]:
    """A content block (`nested`: inside a tool_result, where fewer block types exist)."""
    enum = "MessagesToolResultBlock" if nested else "MessagesContentBlock"
    obj = bf.tagged_object(value, enum)
    kind = bf.tag(obj, "type", RESULT_BLOCK_TYPES if nested else BLOCK_TYPES, enum)
    required: tuple[str, ...] = ()
    if kind == "text":
        required = ("text",)
        if "text" in obj:
            bf.string(obj["text"])
    elif kind == "image":
        required = ("source",)
        if "source" in obj:
            _image_source(obj["source"])
    elif kind == "thinking":
        required = ("thinking",)
        if "thinking" in obj:
            bf.string(obj["thinking"])
        if obj.get("signature") is not None:
            bf.string(obj["signature"])
    elif kind == "tool_use":
        required = ("id", "name", "input")
        for k in ("id", "name"):
            if k in obj:
                bf.string(obj[k])
    elif kind == "document":
        required = ("source",)
        if "source" in obj:
            src = bf.mapping(obj["source"], "MessagesDocumentSource")
            if src.get("media_type") is not None:
                bf.string(src["media_type"])
    elif kind == "tool_result":
        required = ("tool_use_id",)
        if "tool_use_id" in obj:
            bf.string(obj["tool_use_id"])
        if obj.get("is_error") is not None:
            bf.boolean(obj["is_error"])
        c = obj.get("content")
        if c is not None:
            if isinstance(c, list):
                for b in c:
                    _block(b, nested=True)
            elif not isinstance(c, str):
                bf.fail("expected a string or a list")
    elif kind == "tool_addition":
        required = ("tools",)
    for k in required:
        if k not in obj:
            bf.missing(k)
    return obj


def _content(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [_block(b) for b in value]
    bf.fail("expected a string or a list")


def _message(value: Any) -> None:
    """A message: serde's adjacently tagged enum (tag `role`, content `content`)."""
    if isinstance(value, list):
        if not value:
            bf.fail("invalid length 0, expected adjacently tagged enum MessagesMessage")
        bf.variant(value[0], ROLES) if isinstance(value[0], str) else bf.invalid_type(value[0], "variant identifier")
        bf.fail("invalid length 1, expected adjacently tagged enum MessagesMessage")
    if not isinstance(value, dict):
        bf.invalid_type(value, "adjacently tagged enum MessagesMessage")
    obj = value
    for k, v in obj.items():
        if k == "role":
            bf.unit_variant(v, ROLES)
        elif k == "content":
            _content(v)
    for req in ("role", "content"):
        if req not in obj:
            bf.missing(req)


def _system(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str):
        return
    if isinstance(value, list):
        for b in value:
            obj = bf.tagged_object(b, "MessagesSystemBlock")
            bf.tag(obj, "type", ("text",), "MessagesSystemBlock")
            if "text" not in obj:
                bf.missing("text")
            bf.string(obj["text"])
        return
    bf.fail("expected a string or a list")


def _stop_sequences(value: Any) -> None:
    if value is not None:
        for s in bf.sequence(value):
            bf.string(s)


def _tool(value: Any) -> None:
    """A tool declaration (read field by field; errors name the field, as the reference's do)."""
    obj = value if isinstance(value, dict) else {}
    if "name" not in obj and obj.get("type") is None:
        bf.missing("name")
    for k, v in obj.items():
        typed = k in ("name", "type") or (k == "description" and v is not None)
        if typed and not isinstance(v, str):
            bf.fail(f"field `{k}`: invalid type: {bf.unexpected(v)}, expected a string")


def _tool_choice(value: Any) -> None:
    if value is None:
        return
    obj = bf.tagged_object(value, "MessagesToolChoice")
    kind = bf.tag(obj, "type", CHOICE_TYPES, "MessagesToolChoice")
    if kind == "tool":
        if "name" not in obj:
            bf.missing("name")
        bf.string(obj["name"])


def _metadata(value: Any) -> None:
    obj = bf.mapping(value, "MessagesMetadata", 1, bf.opt_string)
    for k, v in obj.items():
        if k == "user_id":
            bf.opt_string(v)


def _output_config(value: Any) -> None:
    if value is None:
        return
    obj = bf.mapping(value, "MessagesOutputConfig", 1, sampling.read_effort)
    for k, v in obj.items():
        if k == "effort":
            sampling.read_effort(v)


_FIELD_READERS: dict[str, Any] = {
    "model": bf.string,
    "messages": bf.each(_message, optional=False),
    "max_tokens": lambda v: bf.opt_unsigned(v, 32),
    "system": _system,
    "stop_sequences": _stop_sequences,
    "stream": bf.opt_bool,
    "temperature": bf.opt_float32,
    "top_p": bf.opt_float32,
    "tools": bf.each(_tool),
    "tool_choice": _tool_choice,
    "thinking": lambda v: sampling.read_thinking(v, "MessagesThinking"),
    "output_config": _output_config,
    "metadata": bf.optional(_metadata),
}


def parse(body: bytes | str | dict[str, Any], *, lenient: bool = False) -> dict[str, Any]:
    """The decoded body, shape-checked; raises a parse `RequestError` like the reference's. `lenient`: the
    spellings of `recipe.protocols.leniency` are accepted too."""
    if lenient:
        body = leniency.relax_body("messages", body)
    return bf.request_body(body, STRUCT, STRUCT_FIELDS, "a string", _FIELD_READERS, ("model", "messages"))


# ----------------------------------------------------------------------------------------------------
# Conversion
# ----------------------------------------------------------------------------------------------------


def _check_base64(data: str, path: str) -> None:
    if not source_base64_ok(data):
        raise conversion_error(f"{path}: base64 decode error")


def _image(
    block: dict[str, Any], version: ModelVersion, path: str, source_path: str | None = None
) -> str | ImageSource:
    """V4: the text `[Unsupported Image]`; V4.1: the image's source (`source_path` defaults to `path`)."""
    if version is ModelVersion.V4:
        return UNSUPPORTED_IMAGE
    src = block["source"]
    where = source_path or path
    if src["type"] == "file":
        raise conversion_error(f"{path}: file_id is not supported. Pass the image as a base64 data url instead.")
    if src["type"] == "base64":
        _check_base64(src["data"], path)
        media = "image/jpeg" if src["media_type"] == "image/jpg" else src["media_type"]
        url = f"data:{media};base64,{src['data']}"
        return ImageSource(kind="data_url", detail="high", data_url=url, path=where)
    if url_scheme(src["url"]) not in ("http", "https"):
        raise conversion_error(f'{path}: invalid url: "{src["url"]}"')
    return ImageSource(kind="url", detail="high", url=src["url"], path=where)


def _document(block: dict[str, Any]) -> str:
    source = block.get("source")
    media = source.get("media_type") if isinstance(source, dict) else None
    return f"[Unsupported document type: {'unknown' if media is None else media}]"


def _tool_result_content(
    block: dict[str, Any], version: ModelVersion, path: str
) -> tuple[str, tuple[ImageSource, ...], tuple[int, ...] | None]:
    c = block.get("content")
    if c is None:
        return "", (), None
    if isinstance(c, str):
        return c, (), None
    parts: list[str | ImageSource] = []
    for k, b in enumerate(c):
        kind = b["type"]
        if kind == "text":
            parts.append(b["text"])
        elif kind == "image":
            parts.append(_image(b, version, f"{path}.tool_result.content[{k}]", source_path=f"{path}.tool_result"))
        elif kind == "document":
            parts.append(_document(b))
    return join_parts(parts)


_SERVER_BLOCK = "Unsupported content block: server tools are not supported"


def _server_block(drop: bool) -> None:
    if not drop:
        raise conversion_error(_SERVER_BLOCK)


def _system_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return "\n\n".join(b["text"] for b in value)


def _convert_messages(obj: dict[str, Any], version: ModelVersion, *, drop_server_blocks: bool = False) -> list[Message]:
    """Messages → conversation messages; `drop_server_blocks`: web-search "drop" mode skips
    server_tool_use / web_search_tool_result blocks instead of rejecting them."""
    raw = obj["messages"]
    if not raw:
        raise conversion_error("messages: at least one message is required")
    out: list[Message] = []
    system = _system_text(obj.get("system"))
    if system is not None:
        out.append(Message(role="system", content=system))
    pending: list[str] = []  # tool_use ids of the previous assistant message awaiting results
    for i, m in enumerate(raw):
        role = m["role"]
        content = m["content"]
        if isinstance(content, list) and not content and role != "system":
            raise conversion_error(f"messages.{i}: all messages must have non-empty content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        answered: list[str] = []
        if role == "user":
            leading = True
            for j, b in enumerate(blocks):
                kind = b["type"]
                path = f"messages.{i}.content[{j}]"
                if kind == "tool_result":
                    tid = b["tool_use_id"]
                    if not leading or tid not in pending or tid in answered:
                        if leading and tid not in pending:
                            raise conversion_error(
                                f"unexpected `messages.{i}.content.{j}: tool_use_id` found in `tool_result` blocks: {tid}. "
                                "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                            )
                        if not leading and tid not in pending:
                            raise conversion_error(
                                f"unexpected `messages.{i}.content.{j}: tool_use_id` found in `tool_result` blocks: {tid}. "
                                "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                            )
                    if leading and tid in answered:
                        raise conversion_error(
                            f"messages.{i}.content.{j}: each tool_use must have a single result. "
                            f"Found multiple `tool_result` blocks with id: {tid}"
                        )
                    text, imgs, offsets = _tool_result_content(b, version, f"messages.{i}.content.{j}")
                    if leading:
                        answered.append(tid)
                        out.append(
                            Message(role="tool", content=text, tool_call_id=tid, image_sources=imgs, image_offsets=offsets)
                        )
                    continue
                if pending and leading:
                    missing_ids = [p for p in pending if p not in answered]
                    if missing_ids:
                        _unanswered(i, missing_ids)
                leading = False
                if kind == "text":
                    out.append(Message(role="user", content=b["text"]))
                elif kind == "image":
                    text, imgs, offsets = join_parts([_image(b, version, path)])
                    out.append(Message(role="user", content=text, image_sources=imgs, image_offsets=offsets))
                elif kind == "document":
                    out.append(Message(role="user", content=_document(b)))
                elif kind == "tool_use":
                    raise conversion_error(f"messages.{i}: `tool_use` blocks can only be in `assistant` messages")
                elif kind in ("server_tool_use", "web_search_tool_result"):
                    _server_block(drop_server_blocks)
            if leading and pending:
                missing_ids = [p for p in pending if p not in answered]
                if missing_ids:
                    _unanswered(i, missing_ids)
            pending = []
            continue
        if pending:
            _unanswered(i, pending)
        if role == "system":
            parts: list[str | ImageSource] = []
            for j, b in enumerate(blocks):
                kind = b["type"]
                if kind == "text":
                    parts.append(b["text"])
                elif kind == "image":
                    parts.append(_image(b, version, f"messages.{i}.content[{j}]", source_path=f"messages.{i}"))
                elif kind == "document":
                    parts.append(_document(b))
                elif kind in ("server_tool_use", "web_search_tool_result"):
                    _server_block(drop_server_blocks)
            text, images, offsets = join_parts(parts)
            if not text and version is ModelVersion.V4:
                continue  # the reference drops an empty system reminder
            if version is ModelVersion.V4:
                # V4 has no image parts ([Unsupported Image] text), so there are no offsets to shift.
                out.append(Message(role="user", content=f"<system-reminder>\n{text}\n</system-reminder>"))
            else:
                out.append(Message(role="system", content=text, image_sources=images, image_offsets=offsets))
            continue
        # assistant
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        for j, b in enumerate(blocks):
            kind = b["type"]
            if calls and kind != "tool_use":
                _unanswered(f"{i}.{j}", [c.id for c in calls])  # tool_use blocks must come last
            if kind == "text":
                texts.append(b["text"])
            elif kind == "thinking":
                reasoning.append(b["thinking"])
            elif kind == "tool_use":
                if any(c.id == b["id"] for c in calls):
                    raise conversion_error(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
                inp = b["input"]
                calls.append(ToolCall(id=b["id"], name=b["name"], arguments=prompt_json(inp)))
            elif kind in ("server_tool_use", "web_search_tool_result"):
                _server_block(drop_server_blocks)
            elif kind == "image":
                texts.append(UNSUPPORTED_IMAGE)
            elif kind == "document":
                texts.append(_document(b))
        out.append(
            Message(
                role="assistant",
                content="\n\n".join(texts),
                reasoning_content="\n\n".join(reasoning) if reasoning else None,
                tool_calls=tuple(calls) if calls else None,
            )
        )
        pending = [c.id for c in calls]
    if pending:
        _unanswered(len(raw) - 1, pending, trailing=True)
    return out


def _top_k(value: Any) -> int | None:
    """`top_k` kept when it is a positive integer (the reference ignores the field entirely)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _unanswered(index: int | str, ids: list[str], trailing: bool = False) -> NoReturn:
    sep = "" if trailing else " "
    raise conversion_error(
        f"messages.{index}:{sep}`tool_use` ids were found without `tool_result` blocks immediately after: {', '.join(ids)}. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )


def convert(obj: dict[str, Any], options: ConversionOptions) -> ConversationRequest:
    """A parsed body → `ConversationRequest` (raises a conversion `RequestError`)."""
    model: str = obj["model"]
    version = resolve_model(model, options)
    specs: list[ToolSpec] = []
    dropped: set[Any] = set()
    for i, t in enumerate(obj.get("tools") or ()):
        kind = t.get("type")
        if kind is not None:
            if kind in WEB_SEARCH_TYPES and options.messages_web_search == "drop":
                dropped.add(t.get("name"))
                continue
            raise conversion_error(f"tools[{i}]: server tools are not supported")
        check_name(t["name"], f"tools[{i}].name")
        specs.append(
            ToolSpec(
                name=t["name"],
                description=t.get("description"),
                parameters=t.get("input_schema"),
                strict=t.get("strict") if isinstance(t.get("strict"), bool) else None,
                name_path=f"tools[{i}].name",
            )
        )
    thinking_flag = sampling.read_thinking(obj.get("thinking"), "MessagesThinking")
    effort = (obj.get("output_config") or {}).get("effort")
    thinking = sampling.resolve_thinking(thinking_flag, effort, options.default_thinking_mode)
    choice_raw = obj.get("tool_choice")
    forced = bool(specs) and choice_raw is not None and choice_raw["type"] in ("tool", "any")
    thinking = leniency.thinking_for_forced_tools(thinking, forced, options.strict_reference)
    messages = _convert_messages(obj, version, drop_server_blocks=options.messages_web_search == "drop")
    messages = settle_reasoning(
        messages,
        thinking,
        options,
        tools_declared=bool(obj.get("tools")),
        missing_message="The `content[].thinking` in the thinking mode must be passed back to the API.",
    )
    choice, named = "auto", None
    if choice_raw is not None:
        kind = choice_raw["type"]
        if kind == "none":
            choice = "none"
        elif kind == "any" and not options.strict_reference:
            choice = "required"  # the reference reads `any` as `auto`
        elif kind == "tool":
            choice, named = "named", choice_raw["name"]
            if named in dropped and named not in {s.name for s in specs}:
                choice, named = "auto", None  # a choice of a dropped web-search tool is dropped too
    selection = finish_tools(specs, choice, named, thinking, names_checked=True)
    stop = sampling.check_stop(obj.get("stop_sequences"))
    temperature = bf.opt_float32(obj.get("temperature"))
    top_p = bf.opt_float32(obj.get("top_p"))
    sampling.check_temperature(temperature)
    sampling.check_top_p(top_p)
    max_tokens = sampling.check_max_tokens(obj.get("max_tokens"), options.max_tokens_upper_bound(thinking), clamp=True)
    schema = None if options.strict_reference else leniency.messages_output_schema(obj)
    if schema is not None:
        validate_schema_document(schema, "Invalid json schema: ")
    conversation = Conversation(
        messages=tuple(messages),
        thinking_mode=thinking,
        tools=selection.tools,
        tool_choice=selection.choice,  # type: ignore[arg-type]
        reasoning_effort=sampling.resolve_effort(thinking, effort),
        response_format="json_schema" if schema is not None else "text",
        response_schema=schema,
    )
    t, p = sampling.resolve_sampling(version, thinking, bool(selection.tools), temperature, top_p)
    inference = InferenceOptions(
        max_tokens=max_tokens,
        temperature=t,
        top_p=p,
        output_constraint=tool_constraint(selection.tools, selection.choice)
        if selection.tools
        else response_constraint(conversation, None),
        top_k=_top_k(obj.get("top_k")),
    )
    return build_request(
        conversation=conversation, version=version, model=model, inference=inference, stop=stop, stream=bool(obj.get("stream"))
    )
