"""Bad backend input is a clear `StreamInputError`; `error_events` closes each API's stream in its own error shape,
which the official SDKs recognise."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from recipe.conversation import (
    Conversation,
    ConversationRequest,
    ModelVersion,
    ParsingOptions,
    ThinkingInitialStage,
)
from recipe.stream import (
    Finish,
    Ready,
    StreamInputError,
    StreamProcessor,
    TextUpdate,
    TokenLogprob,
    TokenUpdate,
    render_sse,
)

APIS = ["chat", "messages", "responses"]


def request(thinking: bool = False, stops: tuple[str, ...] = ()) -> ConversationRequest:
    stage = ThinkingInitialStage.REASONING_START if thinking else None
    return ConversationRequest(
        conversation=Conversation(thinking_mode=thinking),
        model_version=ModelVersion.V4,
        parsing_options=ParsingOptions(parse_tool_calls=True, thinking_initial_stage=stage, stop_sequences=stops),
        stream=True,
    )


def processor(api: str, tokenizer: Any = None, **kw: Any) -> StreamProcessor:
    return StreamProcessor(api, request(**kw), response_id="resp-e", model="m", tokenizer=tokenizer, created=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", APIS)
def test_update_after_finish_is_rejected(api: str) -> None:
    proc = processor(api)
    proc.feed(Ready(3))
    proc.feed(TextUpdate("hi", 1))
    proc.feed(Finish("stop"))
    with pytest.raises(StreamInputError, match="has finished"):
        proc.feed(TextUpdate("more", 1))


@pytest.mark.parametrize("api", APIS)
def test_logprob_count_mismatch_is_rejected_and_closes(api: str, v4_tokenizer: Any) -> None:
    proc = processor(api, v4_tokenizer)
    proc.feed(Ready(3))
    with pytest.raises(StreamInputError, match="1 log probabilities for 2 token IDs"):
        proc.feed(TokenUpdate([100, 101], [TokenLogprob(-0.1)]))
    with pytest.raises(StreamInputError, match="closed"):
        proc.feed(TokenUpdate([100]))


@pytest.mark.parametrize("api", APIS)
def test_invalid_utf8_text_is_rejected(api: str) -> None:
    proc = processor(api)
    proc.feed(Ready(3))
    with pytest.raises(StreamInputError, match="invalid UTF-8"):
        proc.feed(TextUpdate("ok \ud800 broken", 1))


def test_token_id_outside_vocabulary_is_rejected(v4_tokenizer: Any) -> None:
    proc = processor("chat", v4_tokenizer)
    with pytest.raises(StreamInputError, match="outside the vocabulary"):
        proc.feed(TokenUpdate([10**9]))


def test_token_update_without_tokenizer_is_rejected() -> None:
    with pytest.raises(StreamInputError, match="without a tokenizer"):
        processor("chat").feed(TokenUpdate([1, 2]))


def test_unknown_finish_reason_is_rejected() -> None:
    proc = processor("messages")
    proc.feed(TextUpdate("x", 1))
    with pytest.raises(StreamInputError, match="unknown finish reason 'abort'"):
        proc.feed(Finish("abort"))  # type: ignore[arg-type]


def test_ready_after_output_is_rejected() -> None:
    proc = processor("chat")
    proc.feed(TextUpdate("x", 1))
    with pytest.raises(StreamInputError, match="first"):
        proc.feed(Ready(3))


def test_unknown_api_and_output_format_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown api"):
        StreamProcessor("completions", request(), response_id="r", model="m")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown output format"):
        StreamProcessor("chat", request(), response_id="r", model="m", output_format="llama")  # type: ignore[arg-type]


def _broken_stream(api: str, v4_tokenizer: Any) -> tuple[StreamProcessor, bytes]:
    proc = processor(api, v4_tokenizer, thinking=True)
    events = proc.feed(Ready(5, 1))
    events += proc.feed(TextUpdate("Let me think.</think>Hello", 3))
    try:
        proc.feed(TokenUpdate([100, 101], [TokenLogprob(-0.1)]))
    except StreamInputError as exc:
        events += proc.error_events(str(exc))
    return proc, render_sse(events)


def test_chat_mid_stream_error_raises_openai_api_error(v4_tokenizer: Any) -> None:
    _, body = _broken_stream("chat", v4_tokenizer)
    assert body.endswith(b"data: [DONE]\n\n")
    transport = httpx.MockTransport(lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body))
    client = openai.OpenAI(api_key="t", base_url="http://t/v1", http_client=httpx.Client(transport=transport), max_retries=0)
    with (
        pytest.raises(openai.APIError, match="log probabilities"),
        client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream,
    ):
        for _ in stream:
            pass


def test_messages_mid_stream_error_raises_anthropic_error(v4_tokenizer: Any) -> None:
    import httpx2

    _, body = _broken_stream("messages", v4_tokenizer)
    assert b"event: error\n" in body
    transport = httpx2.MockTransport(lambda r: httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body))
    client = anthropic.Anthropic(api_key="t", base_url="http://t", http_client=httpx2.Client(transport=transport), max_retries=0)
    with (
        pytest.raises(anthropic.APIStatusError, match="log probabilities"),
        client.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]) as stream,
    ):
        for _ in stream:
            pass


def test_responses_mid_stream_error_is_an_error_event(v4_tokenizer: Any) -> None:
    proc, body = _broken_stream("responses", v4_tokenizer)
    transport = httpx.MockTransport(lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body))
    client = openai.OpenAI(api_key="t", base_url="http://t/v1", http_client=httpx.Client(transport=transport), max_retries=0)
    with client.responses.stream(model="m", input="hi") as stream:
        types = [event.type for event in stream]
    assert types[-1] == "error"
    seqs = [e.data["sequence_number"] for e in proc.events]
    assert seqs == list(range(len(seqs)))
