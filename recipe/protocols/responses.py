"""OpenAI Responses request bodies → `ConversationRequest` (codec-spec §1, Responses rows).

Validation order as the reference's: model → custom tools → input items → tool uniqueness → `json`
word → temperature → top_p → top_logprobs → max_output_tokens. `instructions` becomes the first
system message; namespace tools flatten to `NS__name` functions; the `apply_patch` custom tool
becomes a function tool with the reference's fixed description; hosted tools (web search, file
search, code interpreter, MCP, ...) are dropped.

Beyond the reference by default (`recipe.protocols.leniency`, off under `strict_reference`): custom
tools other than `apply_patch` become tools with one raw-text parameter `input`, and a custom tool's
grammar `format` constrains that input (the tool-call constraint's tool entry carries it as `grammar`).

Beyond the reference (documented): `previous_response_id` is kept in
`ConversationRequest.previous_response_id` (the reference ignores it); serving it needs stored
responses, which the server provides.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from recipe.conversation import (
    Conversation,
    ConversationRequest,
    ImageSource,
    InferenceOptions,
    Message,
    ModelVersion,
    OutputConstraint,
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
from recipe.protocols.images import image_source_from_url, join_parts
from recipe.protocols.options import ConversionOptions
from recipe.protocols.tools import (
    ABSENT,
    ToolSpec,
    check_name,
    compact_json,
    finish_tools,
    normalize_strict_schema,
    tool_constraint,
    validate_schema_document,
)

STRUCT = "ResponsesRequest"
STRUCT_FIELDS = 13
ROLES = ("user", "assistant", "system", "developer")
PART_TYPES = ("input_text", "output_text", "input_image", "input_file")
OUTPUT_PART_TYPES = ("input_text", "input_image", "input_file")
FORMAT_TYPES = ("text", "json_schema", "json_object")
CHOICE_TYPES = ("function", "web_search", "web_search_2025_08_26", "custom")
DETAILS = ("low", "high", "original", "auto")
DROPPED_TOOL_TYPES = (
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "mcp",
    "image_generation",
    "computer_use_preview",
    "local_shell",
    "shell",
)
WEB_SEARCH_TOOL_TYPES = ("web_search", "web_search_2025_08_26")
UNSUPPORTED_DOCUMENT = "[Unsupported Document]"
APPLY_PATCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "input": {
            "type": "string",
            "description": "The entire contents of the apply_patch command (the *** Begin Patch ... *** End Patch envelope).",
        }
    },
    "required": ["input"],
}


@lru_cache(maxsize=2)
def apply_patch_description(version: ModelVersion) -> str:
    """The reference's fixed description of the `apply_patch` custom tool (V4: 2,889 code points;
    V4.1 puts a blank line before the envelope example)."""
    text = (Path(__file__).with_name("apply_patch_description.txt")).read_text(encoding="utf-8")
    if version is ModelVersion.V41:
        text = text.replace("envelope:\n*** Begin Patch", "envelope:\n\n*** Begin Patch", 1)
    return text


# ----------------------------------------------------------------------------------------------------
# Shape
# ----------------------------------------------------------------------------------------------------


def _part(value: Any) -> None:
    obj = bf.tagged_object(value, "ResponsesContentBlock")
    kind = bf.tag(obj, "type", PART_TYPES, "ResponsesContentBlock")
    if kind in ("input_text", "output_text"):
        if "text" not in obj:
            bf.missing("text")
        bf.string(obj["text"])
    elif kind == "input_image":
        for k, v in obj.items():
            if k in ("image_url", "file_id"):
                bf.opt_string(v)
            elif k == "detail" and v is not None:
                bf.unit_variant(v, DETAILS)


def _output_part(value: Any) -> None:
    obj = bf.tagged_object(value, "ResponsesToolCallOutputItem")
    kind = bf.tag(obj, "type", OUTPUT_PART_TYPES, "ResponsesToolCallOutputItem")
    if kind == "input_text":
        if "text" not in obj:
            bf.missing("text")
        bf.string(obj["text"])


def _message_content(value: Any) -> None:
    if isinstance(value, str):
        return
    if isinstance(value, list):
        for p in value:
            _part(p)
        return
    bf.fail("content should be a string or a list of content blocks")


def _item(value: Any) -> None:
    if not isinstance(value, dict):
        bf.fail("invalid input item")
    kind = value.get("type")
    if "type" in value and not isinstance(kind, str):
        bf.invalid_type(kind, "variant identifier")
    if kind is None or kind == "message":
        if "role" not in value:
            if kind is None:
                bf.fail("invalid input item")
            bf.missing("role")
        bf.unit_variant(value["role"], ROLES)
        if "content" not in value:
            bf.missing("content")
        _message_content(value["content"])
    elif kind == "function_call":
        for req in ("call_id", "name", "arguments"):
            if req not in value:
                bf.missing(req)
            bf.string(value[req])
    elif kind in ("function_call_output", "custom_tool_call_output"):
        if "call_id" not in value:
            return  # not read as a tool output by the reference: ignored
        bf.string(value["call_id"])
        out = value.get("output")
        if "output" not in value:
            bf.missing("output")
        if not isinstance(out, str):
            if isinstance(out, list):
                for p in out:
                    _output_part(p)
            else:
                bf.fail("output should be a string or a list of output content parts")
    elif kind == "reasoning":
        if value.get("content") is not None:
            for part in bf.sequence(value["content"]):
                _reasoning_part(part, "ResponsesReasoningContent")
    elif kind == "custom_tool_call":
        for req in ("call_id", "name", "input"):
            if req not in value:
                bf.missing(req)
            bf.string(value[req])


def _reasoning_part(value: Any, struct: str) -> None:
    obj = bf.mapping(value, struct, 1, bf.string)
    for k, v in obj.items():
        if k == "text":
            bf.string(v)
    if "text" not in obj:
        bf.missing("text")


def _input(value: Any) -> None:
    if value is None or isinstance(value, str):
        return
    if isinstance(value, list):
        for item in value:
            _item(item)
        return
    bf.fail("input should be a string or a list of input items")


def _function_tool(obj: dict[str, Any]) -> None:
    for k, v in obj.items():
        if k == "name":
            bf.string(v)
        elif k == "description":
            bf.opt_string(v)
        elif k == "strict":
            bf.opt_bool(v)
    if "name" not in obj:
        bf.missing("name")


def _tool(value: Any) -> None:
    obj = bf.tagged_object(value, "ResponsesTool")
    if "type" not in obj:
        bf.missing("type")
    kind = obj["type"]
    if not isinstance(kind, str):
        bf.invalid_type(kind, "variant identifier")
    if kind == "function":
        _function_tool(obj)
    elif kind == "namespace":
        if "name" not in obj:
            bf.missing("name")
        bf.string(obj["name"])
        bf.opt_string(obj.get("description"))
        for t in bf.sequence(obj.get("tools") or []):
            inner = bf.tagged_object(t, "ResponsesNamespaceTool")
            bf.tag(inner, "type", ("function", "custom"), "ResponsesNamespaceTool")
            _function_tool(inner)
    elif kind == "custom":
        if "name" not in obj:
            bf.missing("name")
        bf.string(obj["name"])


def _tool_choice(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, str) and value in ("none", "auto", "required"):
        return
    if not isinstance(value, dict):
        bf.fail("expected one of `none`, `auto`, `required` or a tool choice object")
    obj = bf.tagged_object(value, "ResponsesToolChoice")
    kind = bf.tag(obj, "type", CHOICE_TYPES, "ResponsesToolChoice")
    if kind in ("function", "custom"):
        if "name" not in obj:
            bf.missing("name")
        bf.string(obj["name"])


def _text(value: Any) -> None:
    if value is None:
        return
    obj = bf.mapping(value, "ResponsesTextConfig", 2, _text_format)
    for k, v in obj.items():
        if k == "format":
            _text_format(v)
        elif k == "verbosity" and v is not None:
            bf.unit_variant(v, ("low", "medium", "high"))


def _text_format(fmt: Any) -> None:
    f = bf.tagged_object(fmt, "ResponsesTextFormat")
    kind = bf.tag(f, "type", FORMAT_TYPES, "ResponsesTextFormat")
    if kind == "json_schema":
        for k, v in f.items():
            if k == "name":
                bf.string(v)
            elif k == "strict":
                bf.opt_bool(v)
            elif k == "description":
                bf.opt_string(v)
        for req in ("name", "schema"):
            if req not in f:
                bf.missing(req)


def _reasoning(value: Any) -> None:
    if value is None:
        return
    obj = bf.mapping(value, "ResponsesReasoningConfig", 3, sampling.read_effort)
    for k, v in obj.items():
        if k == "effort":
            sampling.read_effort(v)
        elif k == "summary" and v is not None:
            bf.unit_variant(v, ("auto", "concise", "detailed"))


_FIELD_READERS: dict[str, Any] = {
    "model": bf.string,
    "input": _input,
    "instructions": bf.opt_string,
    "tools": bf.each(_tool),
    "tool_choice": _tool_choice,
    "reasoning": _reasoning,
    "text": _text,
    "temperature": bf.opt_float32,
    "top_p": bf.opt_float32,
    "max_output_tokens": lambda v: bf.opt_unsigned(v, 32),
    "top_logprobs": lambda v: bf.opt_unsigned(v, 8),
    "stream": bf.opt_bool,
}


def parse(body: bytes | str | dict[str, Any], *, lenient: bool = False) -> dict[str, Any]:
    """The decoded body, shape-checked; raises a parse `RequestError` like the reference's (`lenient`
    changes nothing in a Responses body's shape: its rules of `recipe.protocols.leniency` apply in `convert`)."""
    return bf.request_body(body, STRUCT, STRUCT_FIELDS, "a string", _FIELD_READERS, ("model",))


# ----------------------------------------------------------------------------------------------------
# Conversion
# ----------------------------------------------------------------------------------------------------


def _content(
    content: Any, index: int, version: ModelVersion, role: str
) -> tuple[str, tuple[ImageSource, ...], tuple[int, ...] | None]:
    """Text, image sources and placeholder offsets of a message item's `content`."""
    if isinstance(content, str):
        return content, (), None
    parts: list[str | ImageSource] = []
    path = f"input[{index}]"
    for j, part in enumerate(content):
        kind = part["type"]
        if kind in ("input_text", "output_text"):
            parts.append(part["text"])
        elif kind == "input_file":
            parts.append(UNSUPPORTED_DOCUMENT)
        elif version is ModelVersion.V4:
            parts.append("[Unsupported Image]")
        else:
            if role == "assistant":
                raise conversion_error("Image in assistant message is not supported")
            url = part.get("image_url")
            if url is None and part.get("file_id") is None:
                raise conversion_error(f"{path}.content[{j}]: input_image must have image_url or file_id")
            if url is None:
                raise conversion_error(
                    f"{path}.content[{j}]: file_id is not supported. Pass the image as a base64 data url instead."
                )
            parts.append(image_source_from_url(url, part.get("detail") or "high", path))
    return join_parts(parts)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return "\n\n".join(p.get("text", "") for p in output if p.get("type") in ("input_text", "output_text"))


class _Assistant:
    """An assistant turn assembled from consecutive message / call / reasoning items, with the outputs
    that answer its calls.

    Calls made while an earlier call of the turn is still unanswered join the turn, even after some
    outputs. The turn's calls are listed by call id (compared as strings) and its outputs follow in
    that order, as the reference converts them.
    """

    def __init__(self, reasoning: str | None) -> None:
        self.texts: list[str] = []
        self.reasoning = reasoning
        self.calls: dict[str, ToolCall] = {}
        self.outputs: dict[str, Message] = {}

    def answered(self) -> bool:
        return len(self.outputs) == len(self.calls)

    def messages(self) -> list[Message]:
        ids = sorted(self.calls)
        turn = Message(
            role="assistant",
            content="\n\n".join(t for t in self.texts if t),
            reasoning_content=self.reasoning,
            tool_calls=tuple(self.calls[c] for c in ids) if ids else None,
        )
        return [turn, *(self.outputs[c] for c in ids if c in self.outputs)]


def _nonempty_call_id(item: dict[str, Any], i: int) -> str:
    cid: str = item["call_id"]
    if not cid:
        raise conversion_error(
            f"Invalid 'input[{i}].call_id': empty string. Expected a string with minimum length 1, but got an empty string instead."
        )
    return cid


def _convert_input(obj: dict[str, Any], version: ModelVersion) -> list[Message]:
    out: list[Message] = []
    instructions = obj.get("instructions")
    inp = obj.get("input")
    if inp is None and instructions is None:
        raise conversion_error("Either input or instructions must be provided")
    if isinstance(inp, list) and not inp:
        raise conversion_error("Input items array must not be empty")
    if instructions:
        out.append(Message(role="system", content=instructions))
    if inp is None:
        return out
    if isinstance(inp, str):
        out.append(Message(role="user", content=inp))
        return out
    turn: _Assistant | None = None
    pending_reasoning: str | None = None
    calls: dict[str, bool] = {}  # call id -> answered

    def close_turn() -> None:
        nonlocal turn
        if turn is not None:
            out.extend(turn.messages())
            turn = None

    def open_turn() -> _Assistant:
        """The turn that content joins: a new one once the current one has outputs."""
        nonlocal turn, pending_reasoning
        if turn is not None and turn.outputs:
            close_turn()
        if turn is None:
            turn = _Assistant(pending_reasoning)
            pending_reasoning = None
        return turn

    def check_answered() -> None:
        """Every call answered. With several unanswered, the reference names one at random (it walks
        a hash map); Recipe names the first in request order."""
        for cid in calls:
            if not calls[cid]:
                raise conversion_error(f"No tool output found for tool call {cid}.")

    for i, item in enumerate(inp):
        kind = item.get("type")
        if kind is None or kind == "message":
            role = item["role"]
            if role == "assistant":
                check_answered()
                t = open_turn()
                text, _, _ = _content(item["content"], i, version, role)
                t.texts.append(text)
                continue
            check_answered()
            if pending_reasoning is not None:
                open_turn()
            close_turn()
            text, images, offsets = _content(item["content"], i, version, role)
            if role == "developer":
                role = "user" if version is ModelVersion.V4 else "system"
            out.append(Message(role=role, content=text, image_sources=images, image_offsets=offsets))
        elif kind in ("function_call", "custom_tool_call"):
            cid = _nonempty_call_id(item, i)
            if cid in calls:
                raise conversion_error(f"Duplicate 'call_id': {cid}.")
            # A call joins the current turn while one of its calls awaits an output.
            t = turn if turn is not None and not turn.answered() else open_turn()
            args = item["arguments"] if kind == "function_call" else compact_json({"input": item["input"]})
            t.calls[cid] = ToolCall(id=cid, name=item["name"], arguments=args)
            calls[cid] = False
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if "call_id" not in item:
                continue
            cid = _nonempty_call_id(item, i)
            if cid not in calls:
                raise conversion_error(f"No tool call found for tool output with call_id {cid}.")
            if calls[cid]:
                raise conversion_error(f"Duplicate tool output for call_id: {cid}.")
            calls[cid] = True
            assert turn is not None and cid in turn.calls  # earlier turns are closed only when answered
            turn.outputs[cid] = Message(role="tool", content=_output_text(item["output"]), tool_call_id=cid)
        elif kind == "reasoning":
            check_answered()
            parts = item.get("content")
            texts = [c.get("text", "") for c in parts] if isinstance(parts, list) else []
            if turn is not None:
                close_turn()
            if texts:  # consecutive reasoning items accumulate, one line each
                joined = "\n".join(texts)
                pending_reasoning = joined if pending_reasoning is None else f"{pending_reasoning}\n{joined}"
    if pending_reasoning is not None:
        open_turn()
    close_turn()
    check_answered()
    return out


def _tool_specs(
    obj: dict[str, Any], options: ConversionOptions, version: ModelVersion, grammars: dict[str, dict[str, Any]]
) -> list[ToolSpec]:
    """The declared tools as `ToolSpec`s; custom tools' grammars (lenient mode) go into `grammars` by name."""
    specs: list[ToolSpec] = []
    for i, t in enumerate(obj.get("tools") or ()):
        kind = t["type"]
        if kind == "function":
            check_name(t["name"], f"tools[{i}].name")
            specs.append(
                ToolSpec(
                    name=t["name"],
                    description=t.get("description"),
                    parameters=t["parameters"] if t.get("parameters") is not None else ABSENT,
                    strict=t.get("strict"),
                    name_path=f"tools[{i}].name",
                )
            )
        elif kind == "namespace":
            check_name(t["name"], f"tools[{i}].name")
            ns_description = t.get("description")
            for j, fn in enumerate(t.get("tools") or ()):
                check_name(fn["name"], f"tools[{i}].tools[{j}].name")
                description = fn.get("description")
                if version is ModelVersion.V4:
                    name = f"{t['name']}__{fn['name']}"
                else:
                    name = f"{t['name']}::{fn['name']}"
                    if ns_description:
                        description = f"{ns_description}\n{description or ''}"
                specs.append(
                    ToolSpec(
                        name=name,
                        description=description,
                        parameters=fn["parameters"] if fn.get("parameters") is not None else ABSENT,
                        strict=fn.get("strict"),
                        name_path=f"tools[{i}].name",
                    )
                )
        elif kind == "custom":
            grammar = None if options.strict_reference else leniency.custom_tool_grammar(t, i)
            if t["name"] == "apply_patch":
                description, parameters = apply_patch_description(version), APPLY_PATCH_PARAMETERS
            elif options.strict_reference:
                raise conversion_error(f"Unsupported custom tool: '{t['name']}'. Only 'apply_patch' is supported.")
            else:
                check_name(t["name"], f"tools[{i}].name")
                description, parameters = t.get("description"), leniency.custom_tool_parameters(grammar)
            if grammar is not None:
                grammars[t["name"]] = grammar
            specs.append(
                ToolSpec(
                    name=t["name"],
                    description=description,
                    parameters=parameters,
                    strict=None,
                    name_path=f"tools[{i}].name",
                )
            )
        elif kind in WEB_SEARCH_TOOL_TYPES and options.responses_web_search == "reject":
            raise conversion_error("Server tools are not supported")
    return specs


def convert(obj: dict[str, Any], options: ConversionOptions) -> ConversationRequest:
    """A parsed body → `ConversationRequest` (raises a conversion `RequestError`)."""
    model: str = obj["model"]
    version = resolve_model(model, options)
    grammars: dict[str, dict[str, Any]] = {}
    specs = _tool_specs(obj, options, version, grammars)
    effort = (obj.get("reasoning") or {}).get("effort")
    thinking = sampling.resolve_thinking(None, effort, options.default_thinking_mode)
    choice_raw = obj.get("tool_choice")
    forced = bool(specs) and (choice_raw == "required" or (
        isinstance(choice_raw, dict) and choice_raw.get("type") in ("function", "custom")))
    thinking = leniency.thinking_for_forced_tools(thinking, forced, options.strict_reference)
    messages = _convert_input(obj, version)
    messages = settle_reasoning(
        messages,
        thinking,
        options,
        tools_declared=bool(obj.get("tools")),
        missing_message="The `reasoning_text` in the thinking mode must be passed back to the API.",
    )
    choice, named = "auto", None
    if isinstance(choice_raw, str):
        choice = choice_raw
    elif isinstance(choice_raw, dict) and choice_raw.get("type") in ("function", "custom"):
        choice, named = "named", choice_raw["name"]
    elif isinstance(choice_raw, dict) and options.responses_web_search == "reject":
        raise conversion_error("Server tools are not supported")  # a web_search choice
    selection = finish_tools(specs, choice, named, thinking, names_checked=True)
    fmt: dict[str, Any] | None = (obj.get("text") or {}).get("format")
    fmt_type: ResponseFormat = fmt["type"] if fmt is not None else "text"
    if fmt_type == "json_object" and not mentions_json(messages):
        raise conversion_error(
            "Response input messages must contain the word 'json' in some form to use 'text.format' of type 'json_object'."
        )
    schema = None
    strict_schema = None
    if fmt is not None and fmt_type == "json_schema":
        schema = fmt.get("schema")
        if fmt.get("strict"):
            strict_schema = normalize_strict_schema(schema, for_tool=False)
        else:
            validate_schema_document(schema, "Invalid json schema: ")
    if selection.strict and selection.tools and fmt_type != "text":
        raise conversion_error("response_format should not be used with tools")
    temperature = bf.opt_float32(obj.get("temperature"))
    top_p = bf.opt_float32(obj.get("top_p"))
    sampling.check_temperature(temperature)
    sampling.check_top_p(top_p)
    top_logprobs = obj.get("top_logprobs")
    sampling.check_top_logprobs(top_logprobs)
    max_tokens = sampling.check_max_tokens(obj.get("max_output_tokens"), options.max_tokens_upper_bound(thinking))
    conversation = Conversation(
        messages=tuple(messages),
        thinking_mode=thinking,
        tools=selection.tools,
        tool_choice=selection.choice,  # type: ignore[arg-type]
        reasoning_effort=sampling.resolve_effort(thinking, effort),
        response_format=fmt_type,
        response_schema=schema,
    )
    t, p = sampling.resolve_sampling(version, thinking, bool(selection.tools), temperature, top_p)
    constraint = (
        _with_grammars(tool_constraint(selection.tools, selection.choice), grammars)
        if selection.tools
        else response_constraint(conversation, strict_schema)
    )
    inference = InferenceOptions(
        max_tokens=max_tokens,
        temperature=t,
        top_p=p,
        logprobs=top_logprobs is not None,
        top_logprobs=top_logprobs,
        output_constraint=constraint,
    )
    return build_request(
        conversation=conversation,
        version=version,
        model=model,
        inference=inference,
        stop=(),
        stream=bool(obj.get("stream")),
        previous_response_id=obj.get("previous_response_id") if isinstance(obj.get("previous_response_id"), str) else None,
    )


def _with_grammars(constraint: OutputConstraint, grammars: dict[str, dict[str, Any]]) -> OutputConstraint:
    """The tool-call constraint with each custom tool's grammar on its entry (`recipe.constraints.tool_call`)."""
    if not grammars:
        return constraint
    listed = json.loads(constraint.schema)
    for entry in listed:
        fn = entry["function"]
        if fn["name"] in grammars:
            fn["grammar"] = grammars[fn["name"]]
    return OutputConstraint(constraint.kind, compact_json(listed))
