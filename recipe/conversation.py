"""The protocol-neutral conversation and the options conversion extracts beside it.

Every API request (Chat Completions, Messages, Responses) converts into a `ConversationRequest`;
every codec renders a `Conversation`; the stream parser reads `ParsingOptions`. These are internal
values: frozen dataclasses, built once by conversion, never mutated afterwards.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool", "latest_reminder"]
ToolChoice = Literal["auto", "none", "required"]
ReasoningEffort = Literal["low", "high", "xhigh", "max"]
ResponseFormat = Literal["text", "json_object", "json_schema", "regex"]
ImageDetail = Literal["low", "high", "original", "auto"]
ImageSourceKind = Literal["data_url", "url", "bytes"]


class ModelVersion(enum.Enum):
    """The prompt format a request targets; it selects the codec."""

    V4 = "DeepseekV4Pro"
    V41 = "DeepseekV41Flash"


class ThinkingInitialStage(enum.Enum):
    """Where output parsing begins when thinking is on."""

    REASONING_START = "ReasoningStart"
    REASONING_CONTINUATION = "ReasoningContinuation"
    CONTENT_CONTINUATION = "ContentContinuation"

    def starts_in_reasoning(self) -> bool:
        return self is not ThinkingInitialStage.CONTENT_CONTINUATION


@dataclass(frozen=True)
class ToolCall:
    """A tool call in assistant history; `arguments` is the caller's JSON text, not validated."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolDefinition:
    """A client function tool. `parameters` is the JSON Schema (normalised when `strict`)."""

    name: str
    description: str | None = None
    parameters: Any = None
    strict: bool | None = None
    defer_loading: bool = False


@dataclass(frozen=True)
class ImageSource:
    """An image attached to a message; `path` is its request location for error messages."""

    kind: ImageSourceKind
    detail: ImageDetail = "high"
    data_url: str | None = None
    url: str | None = None
    data: bytes | None = None
    path: str = ""


@dataclass(frozen=True)
class Message:
    """One conversation message. Role-specific fields keep their defaults on other roles.

    `image_offsets`: the code-point offsets in `content` of the image placeholders that request
    conversion put there, one per image source. `None` (a directly built message) means the first
    occurrences of the placeholder spelling, one per source, as the reference's constructors do. With
    offsets, a placeholder spelled by the client's own text stays plain text.
    """

    role: Role
    content: str
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    image_sources: tuple[ImageSource, ...] = ()
    prefix: bool = False
    tools: tuple[ToolDefinition, ...] | None = None
    image_offsets: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Conversation:
    """What a codec renders: messages plus the prompt-level configuration."""

    messages: tuple[Message, ...] = ()
    thinking_mode: bool = True
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: ToolChoice = "auto"
    reasoning_effort: ReasoningEffort | None = None
    response_format: ResponseFormat = "text"
    response_schema: Any = None
    response_regex: str | None = None


@dataclass(frozen=True)
class OutputConstraint:
    """What constrained decoding would enforce: kind `json`, `regex`, `tool_call` or `tool_call_required`.

    `schema` is compact JSON of the schema, the regex, the Chat-style tool list, or "" for any JSON value.
    """

    kind: Literal["json", "regex", "tool_call", "tool_call_required"]
    schema: str


@dataclass(frozen=True)
class InferenceOptions:
    """Sampling options extracted by conversion. `None` means the caller applies its default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    seed: int | None = None
    output_constraint: OutputConstraint | None = None
    # Beyond the reference (accepted by Recipe, served by the engine):
    n: int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    top_k: int | None = None


@dataclass(frozen=True)
class ParsingOptions:
    """Settings of the output stream parser."""

    parse_tool_calls: bool = True
    starts_in_tool_calls: bool = False
    parse_json_output: bool = False
    thinking_initial_stage: ThinkingInitialStage | None = None
    stop_sequences: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConversationRequest:
    """A converted request: conversation, inference and parsing options, target version, stream flag."""

    conversation: Conversation
    model_version: ModelVersion
    model: str = ""
    inference_options: InferenceOptions = field(default_factory=InferenceOptions)
    parsing_options: ParsingOptions = field(default_factory=ParsingOptions)
    stream: bool = False
    include_usage: bool = False
    # Responses only (beyond the reference): continue a stored response.
    previous_response_id: str | None = None
