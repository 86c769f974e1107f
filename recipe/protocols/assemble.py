"""The common tail of every conversion: assistant reasoning, thinking stage, options, the request."""

from __future__ import annotations

import re

from recipe.conversation import (
    Conversation,
    ConversationRequest,
    InferenceOptions,
    Message,
    ModelVersion,
    OutputConstraint,
    ParsingOptions,
    ThinkingInitialStage,
)
from recipe.errors import conversion_error
from recipe.protocols.options import ConversionOptions

_JSON_WORD = re.compile(r"json", re.IGNORECASE)


def resolve_model(model: str, options: ConversionOptions) -> ModelVersion:
    """The version of a `model` name; unknown names get the reference's message."""
    version = options.model_versions_by_name.get(model)
    if version is None:
        names = ", ".join(sorted(options.model_versions_by_name))
        raise conversion_error(f"The supported API model names are {names}, but you passed {model}.")
    return version


def mentions_json(messages: list[Message]) -> bool:
    """Whether any message content holds the letters `json` (any case)."""
    return any(_JSON_WORD.search(m.content) for m in messages)


REASONING_MISSING = "The `reasoning_content` in the thinking mode must be passed back to the API."


def settle_reasoning(
    messages: list[Message],
    thinking: bool,
    options: ConversionOptions,
    *,
    tools_declared: bool = False,
    missing_message: str = REASONING_MISSING,
) -> list[Message]:
    """Thinking on: fill missing assistant reasoning with ""; off: drop all reasoning.

    With `reasoning_content_behavior="reject"`, an assistant turn after the last user message (the
    current tool loop) without reasoning is rejected when it made tool calls or the request declares
    tools (even with tool_choice `none`), as the reference does.
    """
    if not thinking:
        return [_with_reasoning(m, None) if m.reasoning_content is not None else m for m in messages]
    if options.reasoning_content_behavior == "reject":
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        for i, m in enumerate(messages):
            if i > last_user and m.role == "assistant" and m.reasoning_content is None and (tools_declared or m.tool_calls):
                raise conversion_error(missing_message)
    return [
        _with_reasoning(m, "") if m.role == "assistant" and m.reasoning_content is None else m for m in messages
    ]


def _with_reasoning(m: Message, reasoning: str | None) -> Message:
    """`replace(m, reasoning_content=reasoning)` without `dataclasses.replace`'s introspection."""
    return Message(
        role=m.role,
        content=m.content,
        reasoning_content=reasoning,
        tool_calls=m.tool_calls,
        tool_call_id=m.tool_call_id,
        image_sources=m.image_sources,
        prefix=m.prefix,
        tools=m.tools,
        image_offsets=m.image_offsets,
    )


def thinking_stage(messages: list[Message], thinking: bool) -> ThinkingInitialStage | None:
    if not thinking:
        return None
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant" and last.prefix:
        if last.content:
            return ThinkingInitialStage.CONTENT_CONTINUATION
        if last.reasoning_content:
            return ThinkingInitialStage.REASONING_CONTINUATION
    return ThinkingInitialStage.REASONING_START


def build_request(
    *,
    conversation: Conversation,
    version: ModelVersion,
    model: str,
    inference: InferenceOptions,
    stop: tuple[str, ...],
    stream: bool,
    include_usage: bool = False,
    previous_response_id: str | None = None,
) -> ConversationRequest:
    tools_active = bool(conversation.tools)
    parsing = ParsingOptions(
        parse_tool_calls=tools_active,
        starts_in_tool_calls=tools_active and conversation.tool_choice == "required",
        parse_json_output=conversation.response_format == "json_object",
        thinking_initial_stage=thinking_stage(list(conversation.messages), conversation.thinking_mode),
        stop_sequences=stop,
    )
    return ConversationRequest(
        conversation=conversation,
        model_version=version,
        model=model,
        inference_options=inference,
        parsing_options=parsing,
        stream=stream,
        include_usage=include_usage,
        previous_response_id=previous_response_id,
    )


def response_constraint(conversation: Conversation, strict_schema: object | None) -> OutputConstraint | None:
    """The constraint of a response format (tools take precedence and are handled by the caller)."""
    from recipe.protocols.tools import compact_json

    fmt = conversation.response_format
    if fmt == "json_object":
        return OutputConstraint("json", "")
    if fmt == "json_schema":
        schema = strict_schema if strict_schema is not None else conversation.response_schema
        return OutputConstraint("json", compact_json(schema))
    if fmt == "regex":
        return OutputConstraint("regex", conversation.response_regex or "")
    return None
