"""OpenAI Chat Completions request bodies → `ConversationRequest` (codec-spec §1, Chat rows).

`parse(body)` checks the body's shape and returns the decoded object, with errors worded like the
reference's deserialiser; `convert(obj, options)` applies the conversion rules in the reference's
validation order: model → messages → `json` word → tools → stop → stream_options → n → penalties →
temperature → top_p → top_logprobs → max_tokens → seed.

Beyond the reference (documented): `n` up to `options.max_n` (reference: only 1), `presence_penalty`
and `frequency_penalty` kept in `InferenceOptions`, `stream_options.include_usage` kept in
`ConversationRequest.include_usage`.
"""

from __future__ import annotations

from typing import Any

from recipe.conversation import (
    Conversation,
    ConversationRequest,
    ImageSource,
    InferenceOptions,
    Message,
    ModelVersion,
    ResponseFormat,
    ToolCall,
)
from recipe.errors import conversion_error
from recipe.protocols import body_fields as bf
from recipe.protocols import leniency, sampling
from recipe.protocols.assemble import (
    build_request,
    mentions_json,
    resolve_model,
    response_constraint,
    settle_reasoning,
)
from recipe.protocols.images import UNSUPPORTED_IMAGE, image_source_from_url, join_parts
from recipe.protocols.options import ConversionOptions
from recipe.protocols.tools import (
    ABSENT,
    ToolSpec,
    finish_tools,
    normalize_strict_schema,
    tool_constraint,
    validate_schema_document,
)

ROLES = ("system", "user", "assistant", "tool", "latest_reminder")
PART_TYPES = ("text", "image_url", "file")
DETAILS = ("low", "high", "original", "auto")
FORMAT_TYPES = ("json_object", "json_schema", "regex", "text")
STRUCT = "ChatCompletionRequest"
STRUCT_FIELDS = 20

# ----------------------------------------------------------------------------------------------------
# Shape
# ----------------------------------------------------------------------------------------------------


def _content(value: Any, optional: bool) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [_part(p) for p in value]
    bf.fail("content should be a string or a list")


def _part(value: Any) -> dict[str, Any]:
    obj = bf.tagged_object(value, "ChatCompletionRequestContentBlock")
    kind = bf.tag(obj, "type", PART_TYPES, "ChatCompletionRequestContentBlock")
    if kind == "text":
        if "text" not in obj:
            bf.missing("text")
        bf.string(obj["text"])
    elif kind == "image_url":
        if "image_url" not in obj:
            bf.missing("image_url")
        img = bf.mapping(obj["image_url"], "ChatCompletionImageUrl", 2, bf.string)
        for k, v in img.items():
            if k == "url":
                bf.string(v)
            elif k == "detail" and v is not None:
                bf.unit_variant(v, DETAILS)
        if "url" not in img:
            bf.missing("url")
    else:
        if "file" not in obj:
            bf.missing("file")
    return obj


def _tool_call(value: Any) -> None:
    obj = bf.mapping(value, "ChatCompletionRequestToolCall", 3, bf.string)
    for k, v in obj.items():
        if k == "id":
            bf.string(v)
        elif k == "type":
            bf.unit_variant(v, ("function",))
        elif k == "function":
            fn = bf.mapping(v, "ChatCompletionRequestFunctionCall", 2, bf.string)
            for fk, fv in fn.items():
                if fk in ("name", "arguments"):
                    bf.string(fv)
            for req in ("name", "arguments"):
                if req not in fn:
                    bf.missing(req)
    for req in ("id", "type", "function"):
        if req not in obj:
            bf.missing(req)


def _reasoning(m: dict[str, Any]) -> str | None:
    """Assistant reasoning: `reasoning_content` (DeepSeek's field), else vLLM's `reasoning` (beyond the
    reference, which ignores that key) when it is a string."""
    rc = m.get("reasoning_content")
    if rc is not None:
        return str(rc)
    alt = m.get("reasoning")
    return alt if isinstance(alt, str) else None


def _message(value: Any) -> dict[str, Any]:
    obj = bf.tagged_object(value, "ChatCompletionRequestMessage", "role")
    role = bf.tag(obj, "role", ROLES, "ChatCompletionRequestMessage")
    for k, v in obj.items():
        if k == "content":
            if role == "latest_reminder":
                bf.string(v)
            else:
                _content(v, optional=role == "assistant")
        elif k == "name":
            bf.opt_string(v)
        elif role == "assistant":
            if k == "reasoning_content":
                bf.opt_string(v)
            elif k == "tool_calls" and v is not None:
                for c in bf.sequence(v):
                    _tool_call(c)
            elif k == "prefix":
                bf.opt_bool(v)
        elif role == "tool" and k == "tool_call_id":
            bf.string(v)
    if role != "assistant" and "content" not in obj:
        bf.missing("content")
    if role == "tool" and "tool_call_id" not in obj:
        bf.missing("tool_call_id")
    return obj


def _response_format(value: Any) -> None:
    obj = bf.tagged_object(value, "ChatCompletionResponseFormat")
    kind = bf.tag(obj, "type", FORMAT_TYPES, "ChatCompletionResponseFormat")
    if kind == "json_schema":
        if "json_schema" not in obj:
            bf.missing("json_schema")
        js = bf.mapping(obj["json_schema"], "ChatCompletionResponseFormatJsonSchema", 3, lambda v: None)
        for k, v in js.items():
            if k == "name":
                bf.opt_string(v)
            elif k == "strict":
                bf.opt_bool(v)
        if "schema" not in js:
            bf.missing("schema")
    elif kind == "regex":
        if "regex" not in obj:
            bf.missing("regex")
        bf.string(obj["regex"])


def _tool(value: Any) -> None:
    obj = bf.mapping(value, "ChatCompletionTool", 2, lambda v: bf.unit_variant(v, ("function",)))
    for k, v in obj.items():
        if k == "type":
            bf.unit_variant(v, ("function",))
        elif k == "function":
            fn = bf.mapping(v, "ChatCompletionFunctionDefinition", 4, bf.string)
            for fk, fv in fn.items():
                if fk == "name":
                    bf.string(fv)
                elif fk == "description":
                    bf.opt_string(fv)
                elif fk == "strict":
                    bf.opt_bool(fv)
            if "name" not in fn:
                bf.missing("name")
    for req in ("type", "function"):
        if req not in obj:
            bf.missing(req)


def _tool_choice(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str) and value in ("none", "auto", "required"):
        return
    if isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"] != "function":
        bf.fail(f"field `type`: unknown variant `{value['type']}`, expected `function`")
    if isinstance(value, dict) and value.get("type") == "function" and not isinstance(value.get("function"), dict):
        fn_value = value.get("function")  # absent reads as null
        bf.fail(f"field `function`: invalid type: {bf.unexpected(fn_value)}, expected struct ChatCompletionToolChoiceFunction")
    fn = value.get("function") if isinstance(value, dict) else None
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return
    bf.fail("expected one of `none`, `auto`, `required` or a tool")


def _stream_options(value: Any) -> None:
    if value is None:
        return
    obj = bf.mapping(value, "ChatCompletionStreamOptions", 1, bf.opt_bool)
    for k, v in obj.items():
        if k == "include_usage":
            bf.opt_bool(v)


_FIELD_READERS: dict[str, Any] = {
    "model": bf.string,
    "messages": bf.each(_message, optional=False),
    "temperature": bf.opt_float32,
    "top_p": bf.opt_float32,
    "presence_penalty": bf.opt_float32,
    "frequency_penalty": bf.opt_float32,
    "max_tokens": lambda v: bf.opt_unsigned(v, 32),
    "n": lambda v: bf.opt_unsigned(v, 8),
    "top_logprobs": lambda v: bf.opt_unsigned(v, 8),
    "seed": lambda v: bf.opt_unsigned(v, 64),
    "logprobs": bf.opt_bool,
    "stream": bf.opt_bool,
    "stop": sampling.read_stop,
    "stream_options": _stream_options,
    "response_format": bf.optional(_response_format),
    "tools": bf.each(_tool),
    "tool_choice": _tool_choice,
    "thinking": lambda v: sampling.read_thinking(v, "ChatCompletionThinking"),
    "reasoning_effort": sampling.read_effort,
}
_LENIENT_FIELD_READERS: dict[str, Any] = {**_FIELD_READERS, "max_completion_tokens": lambda v: bf.opt_unsigned(v, 32)}


def parse(body: bytes | str | dict[str, Any], *, lenient: bool = False) -> dict[str, Any]:
    """The decoded body, shape-checked; raises a parse `RequestError` like the reference's. `lenient`: the
    spellings of `recipe.protocols.leniency` are accepted too."""
    if lenient:
        body = leniency.relax_body("chat", body)
        readers = _LENIENT_FIELD_READERS
    else:
        readers = _FIELD_READERS
    return bf.request_body(body, STRUCT, STRUCT_FIELDS, "a sequence", readers, ("messages", "model"))


# ----------------------------------------------------------------------------------------------------
# Conversion
# ----------------------------------------------------------------------------------------------------


def _convert_content(
    content: Any, role: str, index: int, version: ModelVersion
) -> tuple[str, tuple[ImageSource, ...], tuple[int, ...] | None]:
    """Text, image sources and placeholder offsets of a message's `content`."""
    if content is None:
        return "", (), None
    if isinstance(content, str):
        return content, (), None
    parts: list[str | ImageSource] = []
    path = f".messages[{index}]"
    for part in content:
        kind = part["type"]
        if kind == "text":
            parts.append(part["text"])
        elif version is ModelVersion.V4:
            parts.append(UNSUPPORTED_IMAGE)
        elif kind == "file":
            raise conversion_error(f"{path}: file must have a file_id or file_data")
        else:
            if role == "assistant":
                raise conversion_error("Image in assistant message is not supported")
            img = part["image_url"]
            parts.append(image_source_from_url(img["url"], img.get("detail") or "high", path))
    return join_parts(parts)


def _convert_messages(raw: list[dict[str, Any]], version: ModelVersion) -> list[Message]:
    if not raw:
        raise conversion_error("Empty input messages")
    out: list[Message] = []
    pending: list[str] = []
    insufficient = (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        "'tool_call_id'. (insufficient tool messages following tool_calls message)"
    )
    last = len(raw) - 1
    misplaced_prefix = False
    for i, m in enumerate(raw):
        role = m["role"]
        if role != "tool" and pending:
            raise conversion_error(insufficient)
        if role == "tool":
            call_id = m["tool_call_id"]
            if call_id not in pending:
                if pending:
                    raise conversion_error(
                        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                        f"'tool_call_id', The following tool_call_ids did not have response messages: {call_id}"
                    )
                raise conversion_error("Messages with role 'tool' must be a response to a preceding message with 'tool_calls'")
            pending.remove(call_id)
            content, images, offsets = _convert_content(m["content"], role, i, version)
            out.append(
                Message(role="tool", content=content, tool_call_id=call_id, image_sources=images, image_offsets=offsets)
            )
            continue
        if role == "assistant":
            content_raw = m.get("content")
            calls_raw = m.get("tool_calls")
            if content_raw is None and calls_raw is None:
                raise conversion_error("Invalid assistant message: content or tool_calls must be set")
            if calls_raw is not None and not calls_raw:
                raise conversion_error(
                    f"Invalid 'messages[{i}].tool_calls': empty array. Expected an array with minimum length 1, but got an empty array instead."
                )
            prefix = bool(m.get("prefix"))
            misplaced_prefix = misplaced_prefix or (prefix and i != last)
            content, _, _ = _convert_content(content_raw, role, i, version)
            calls = None
            if calls_raw is not None:
                calls = tuple(
                    ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"]) for c in calls_raw
                )
                _check_unique_ids(calls, i)
                pending = [c.id for c in calls]
            out.append(
                Message(
                    role="assistant",
                    content=content,
                    reasoning_content=_reasoning(m),
                    tool_calls=calls,
                    prefix=prefix,
                )
            )
            continue
        content, images, offsets = _convert_content(m["content"], role, i, version)
        if role == "system" and not content:
            continue  # the reference drops empty system messages
        out.append(Message(role=role, content=content, image_sources=images, image_offsets=offsets))
    if pending:
        raise conversion_error(insufficient)
    if misplaced_prefix:  # checked once every message converted, as the reference does
        raise conversion_error(
            "Invalid completion message: prefix set true with message which is not final message or message role is not assistant"
        )
    return out


def _check_unique_ids(calls: tuple[ToolCall, ...], index: int) -> None:
    """One assistant message's call ids are distinct; the first repeat (in order) is named."""
    seen: set[str] = set()
    for c in calls:
        if c.id in seen:
            raise conversion_error(f"Duplicate value for 'tool_call_id' of {c.id} in message[{index}]")
        seen.add(c.id)


def convert(obj: dict[str, Any], options: ConversionOptions) -> ConversationRequest:
    """A parsed body → `ConversationRequest` (raises a conversion `RequestError`)."""
    model: str = obj["model"]
    version = resolve_model(model, options)
    thinking_flag = sampling.read_thinking(obj.get("thinking"), "ChatCompletionThinking")
    effort = obj.get("reasoning_effort")
    thinking = sampling.resolve_thinking(thinking_flag, effort, options.default_thinking_mode)
    choice_raw = obj.get("tool_choice")
    forced = bool(obj.get("tools")) and (choice_raw == "required" or isinstance(choice_raw, dict))
    thinking = leniency.thinking_for_forced_tools(thinking, forced, options.strict_reference)
    messages = _convert_messages(obj["messages"], version)
    messages = settle_reasoning(messages, thinking, options, tools_declared=bool(obj.get("tools")))
    prefix = bool(messages) and messages[-1].role == "assistant" and messages[-1].prefix
    tools_raw = obj.get("tools")
    fmt: dict[str, Any] | None = obj.get("response_format")
    fmt_type: ResponseFormat = fmt["type"] if fmt is not None else "text"
    if prefix and fmt_type == "json_object":
        raise conversion_error("response_format json_object should not be used with prefix")
    if fmt_type == "json_object" and not mentions_json(messages):
        raise conversion_error(
            "Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'."
        )
    # tools
    named = None
    choice = "auto"
    if isinstance(choice_raw, dict):
        choice, named = "named", choice_raw["function"]["name"]
    elif isinstance(choice_raw, str):
        choice = choice_raw
    specs = [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description"),
            parameters=t["function"]["parameters"]
            if t["function"].get("parameters") is not None
            else ABSENT,
            strict=t["function"].get("strict"),
            name_path=f"tools[{i}].function.name",
        )
        for i, t in enumerate(tools_raw or ())
    ]
    selection = finish_tools(specs, choice, named, thinking)
    if prefix and (tools_raw or any(m.tool_calls for m in messages)):
        raise conversion_error("Function call should not be used with prefix")
    # response format
    schema = regex = None
    strict_schema = None
    if fmt is not None and fmt_type == "json_schema":
        js = fmt["json_schema"]
        schema = js["schema"]
        if js.get("strict"):
            strict_schema = normalize_strict_schema(schema, for_tool=False)
        else:
            validate_schema_document(schema, "Invalid json schema: ")
    elif fmt is not None and fmt_type == "regex":
        regex = fmt["regex"]
    if selection.strict and selection.tools and fmt is not None:
        raise conversion_error("response_format should not be used with tools")
    stop = sampling.check_stop(obj.get("stop"))
    stream = bool(obj.get("stream"))
    stream_options = obj.get("stream_options")
    if stream_options is not None and not stream:
        raise conversion_error("stream_options should be set along with stream = true")
    n = obj.get("n")
    if n is not None and not (1 <= n <= options.max_n):
        raise conversion_error(f"Invalid n value, the valid range of n is [1, {options.max_n}]")
    presence = bf.opt_float32(obj.get("presence_penalty"))
    frequency = bf.opt_float32(obj.get("frequency_penalty"))
    if presence is not None and not (-2.0 <= presence <= 2.0):
        raise conversion_error("Invalid presence_penalty value, the valid range of presence_penalty is [-2, 2]")
    if frequency is not None and not (-2.0 <= frequency <= 2.0):
        raise conversion_error("Invalid frequency_penalty value, the valid range of frequency_penalty is [-2, 2]")
    temperature = bf.opt_float32(obj.get("temperature"))
    top_p = bf.opt_float32(obj.get("top_p"))
    sampling.check_temperature(temperature)
    sampling.check_top_p(top_p)
    logprobs = bool(obj.get("logprobs"))
    top_logprobs = obj.get("top_logprobs")
    if top_logprobs is not None and not logprobs:
        raise conversion_error(
            "Invalid top_logprobs and logprobs value, logprobs must be set to true if top_logprobs is used."
        )
    sampling.check_top_logprobs(top_logprobs)
    limit = obj.get("max_tokens")
    if not options.strict_reference:
        limit = leniency.completion_limit(limit, obj.get("max_completion_tokens"))
    max_tokens = sampling.check_max_tokens(limit, options.max_tokens_upper_bound(thinking))
    seed = obj.get("seed")
    if seed is not None and seed >= 2**63:
        raise conversion_error("Invalid seed value, the valid range of seed is [0, 2^63)")

    conversation = Conversation(
        messages=tuple(messages),
        thinking_mode=thinking,
        tools=selection.tools,
        tool_choice=selection.choice,  # type: ignore[arg-type]
        reasoning_effort=sampling.resolve_effort(thinking, effort),
        response_format=fmt_type,
        response_schema=schema,
        response_regex=regex,
    )
    t, p = sampling.resolve_sampling(version, thinking, bool(selection.tools), temperature, top_p)
    constraint = (
        tool_constraint(selection.tools, selection.choice)
        if selection.tools
        else response_constraint(conversation, strict_schema)
    )
    inference = InferenceOptions(
        max_tokens=max_tokens,
        temperature=t,
        top_p=p,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        seed=seed,
        output_constraint=constraint,
        n=n or 1,
        presence_penalty=presence,
        frequency_penalty=frequency,
    )
    include_usage = bool(stream_options and stream_options.get("include_usage"))
    return build_request(
        conversation=conversation,
        version=version,
        model=model,
        inference=inference,
        stop=stop,
        stream=stream,
        include_usage=include_usage,
    )
