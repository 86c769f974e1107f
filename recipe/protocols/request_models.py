"""Pydantic v2 models of the three request bodies, for documentation and OpenAPI schemas.

They describe the shape `recipe.codec.convert` accepts (every body the official reference converts
validates against them: `tests/codec/test_request_models.py` checks the whole golden set). They are
not on the conversion path: `convert` reads bodies with the hand-written readers of `body_fields`, whose
error messages are the reference's word for word. Unknown fields are allowed, as the reference ignores
them; content parts, items and tools stay loosely typed (`dict`) where the APIs define many variants.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Thinking(_Open):
    type: Literal["adaptive", "enabled", "disabled"]
    budget_tokens: int | None = Field(default=None, ge=0)


# --------------------------------------------------------------------------------------------------
# Chat Completions
# --------------------------------------------------------------------------------------------------


class ChatFunctionCall(_Open):
    name: str
    arguments: str


class ChatToolCall(_Open):
    id: str
    type: Literal["function"]
    function: ChatFunctionCall


class ChatMessage(_Open):
    """One message; `content` is a string or a list of `text` / `image_url` / `file` parts."""

    role: Literal["system", "user", "assistant", "tool", "latest_reminder"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None
    prefix: bool | None = None


class ChatFunction(_Open):
    name: str
    description: str | None = None
    parameters: Any = None
    strict: bool | None = None


class ChatTool(_Open):
    type: Literal["function"]
    function: ChatFunction


class ChatStreamOptions(_Open):
    include_usage: bool | None = None


class ChatCompletionRequest(_Open):
    """OpenAI Chat Completions request body (Recipe also accepts `n` up to 16)."""

    model: str
    messages: list[ChatMessage]
    thinking: Thinking | None = None
    reasoning_effort: Effort | None = None
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(default=None, ge=0, lt=2**32)
    n: int | None = Field(default=None, ge=0, lt=2**8)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, lt=2**8)
    seed: int | None = Field(default=None, ge=0, lt=2**64)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: ChatStreamOptions | None = None


# --------------------------------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------------------------------


class MessagesMessage(_Open):
    """One message; `content` is a string or a list of content blocks (text, image, document,
    thinking, tool_use, tool_result, ...)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class MessagesOutputConfig(_Open):
    effort: Effort | None = None


class MessagesRequest(_Open):
    """Anthropic Messages request body (`max_tokens` optional; above the bound it is lowered)."""

    model: str
    messages: list[MessagesMessage]
    max_tokens: int | None = Field(default=None, ge=0, lt=2**32)
    system: str | list[dict[str, Any]] | None = None
    thinking: Thinking | None = None
    output_config: MessagesOutputConfig | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None


# --------------------------------------------------------------------------------------------------
# OpenAI Responses
# --------------------------------------------------------------------------------------------------


class ResponsesReasoning(_Open):
    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesText(_Open):
    format: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(_Open):
    """OpenAI Responses request body (Recipe keeps `previous_response_id`)."""

    model: str
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    reasoning: ResponsesReasoning | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    text: ResponsesText | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = Field(default=None, ge=0, lt=2**32)
    top_logprobs: int | None = Field(default=None, ge=0, lt=2**8)
    stream: bool | None = None
    previous_response_id: Any = None


REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "chat": ChatCompletionRequest,
    "messages": MessagesRequest,
    "responses": ResponsesRequest,
}
