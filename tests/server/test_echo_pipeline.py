"""The whole request path (conversion → DeepSeek V4 prompt → backend → stream processor → HTTP) on the
instant echo backend, driven by the official `openai` and `anthropic` SDKs and raw HTTP.

The echo backend repeats the prompt's plain tokens, so every expected text is computable here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, echo_model_card
from recipe.server.config import ServerConfig

MODEL = "DeepSeek-V4-Pro"
KEY = "sk-echo"
NO_THINK = {"thinking": {"type": "disabled"}}


def echo_text(backend: EchoBackend, prompt_ids: list[int], n_tokens: int) -> str:
    special = backend.model.tokenizer.special_ids
    src = [t for t in prompt_ids if t not in special]
    return backend.model.tokenizer.decode([src[i % len(src)] for i in range(n_tokens)])


@pytest.fixture(scope="module")
def backend() -> EchoBackend:
    return EchoBackend(model=echo_model_card(MODEL))


@pytest.fixture(scope="module")
def srv(backend: EchoBackend, serve, tmp_path_factory):  # type: ignore[no-untyped-def]
    db = tmp_path_factory.mktemp("db") / "responses.sqlite3"
    app = create_app(ServerConfig(api_keys=(KEY,), responses_db=str(db)), backend)
    with serve(app) as s:
        yield s


@pytest.fixture(scope="module")
def oa(srv) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def an(srv) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=srv.base, api_key=KEY, max_retries=0)


def prompt_ids(srv, messages: list[dict]) -> list[int]:  # type: ignore[no-untyped-def]
    r = httpx.post(srv.base + "/tokenize", json={"model": MODEL, "messages": messages, **NO_THINK},
                   headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    return list(r.json()["tokens"])


def test_chat_create_and_stream_agree(oa: openai.OpenAI, backend: EchoBackend, srv) -> None:  # type: ignore[no-untyped-def]
    msgs = [{"role": "user", "content": "Say hello to the echo"}]
    ids = prompt_ids(srv, msgs)
    r = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=7, extra_body=NO_THINK)  # type: ignore[arg-type]
    assert r.id.startswith("chatcmpl-") and r.model == MODEL
    assert r.choices[0].message.content == echo_text(backend, ids, 7)
    assert r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 7
    assert r._request_id and r._request_id.startswith("req_")  # type: ignore[attr-defined]

    chunks = list(oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=7, stream=True,  # type: ignore[arg-type]
                                             stream_options={"include_usage": True}, extra_body=NO_THINK))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    # OpenAI's framing: one extra chunk with choices [] carries the usage, every other chunk has null
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 7
    assert all(c.usage is None for c in chunks[:-1]) and all(c.choices for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1
    unasked = list(oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=7, stream=True,  # type: ignore[arg-type]
                                              extra_body=NO_THINK))
    assert all(c.usage is None and c.choices for c in unasked)


def test_chat_n_choices(oa: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "two please"}]
    r = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, n=3, extra_body=NO_THINK)  # type: ignore[arg-type]
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.message.content for c in r.choices}) == 1  # the echo is deterministic
    assert r.usage is not None and r.usage.completion_tokens == 9
    with httpx.stream("POST", str(oa.base_url) + "chat/completions", headers={"authorization": f"Bearer {KEY}"},
                      json={"model": MODEL, "messages": msgs, "max_tokens": 3, "n": 2, "stream": True, **NO_THINK}) as s:
        frames = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "data: [DONE]" and frames.count("data: [DONE]") == 1
    with httpx.stream("POST", str(oa.base_url) + "chat/completions", headers={"authorization": f"Bearer {KEY}"},
                      json={"model": MODEL, "messages": msgs, "max_tokens": 3, "n": 2, "stream": True,
                            "stream_options": {"include_usage": True}, **NO_THINK}) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
    usage_chunks = [c for c in chunks if c["usage"] is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1]["choices"] == []
    assert usage_chunks[0]["usage"]["completion_tokens"] == 6
    assert usage_chunks[0]["usage"]["total_tokens"] == usage_chunks[0]["usage"]["prompt_tokens"] + 6


def test_messages_create_stream_and_count_tokens(an: anthropic.Anthropic) -> None:
    kwargs = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Echo me"}],
              "thinking": {"type": "disabled"}}
    m = an.messages.create(**kwargs)  # type: ignore[call-overload]
    assert m.id.startswith("msg_") and m.stop_reason == "max_tokens" and m.usage.output_tokens == 5
    with an.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == m.content[0].text  # type: ignore[union-attr]
    assert final.usage.output_tokens == 5 and final.stop_reason == "max_tokens"
    count = an.messages.count_tokens(model=MODEL, messages=kwargs["messages"], thinking={"type": "disabled"})
    assert count.input_tokens == m.usage.input_tokens


def test_responses_store_retrieve_continue_delete(oa: openai.OpenAI) -> None:
    first = oa.responses.create(model=MODEL, input="Remember the word kumquat", max_output_tokens=4,
                                reasoning={"effort": "none"})  # type: ignore[arg-type]
    assert first.id.startswith("resp_") and first.store is True
    got = oa.responses.retrieve(first.id)
    assert got.output_text == first.output_text and got.id == first.id
    second = oa.responses.create(model=MODEL, input="What was it?", previous_response_id=first.id,
                                 max_output_tokens=4, reasoning={"effort": "none"})  # type: ignore[arg-type]
    assert second.previous_response_id == first.id
    # the echo starts with the earliest plain text of its prompt: the first turn's words
    assert second.output_text.startswith(first.output_text[:5])
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens
    # the echo always stops at max_output_tokens, so the stream ends with response.incomplete (the SDK's
    # get_final_response() insists on response.completed): read the events instead
    events = list(oa.responses.create(model=MODEL, input="and now?", previous_response_id=second.id, stream=True,
                                      max_output_tokens=3, reasoning={"effort": "none"}))  # type: ignore[arg-type]
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    third = events[-1].response  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    stored = oa.responses.retrieve(third.id)
    assert stored.previous_response_id == second.id and stored.output_text == third.output_text
    oa.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        oa.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        oa.responses.create(model=MODEL, input="x", previous_response_id=first.id)
    unstored = oa.responses.create(model=MODEL, input="x", store=False, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        oa.responses.retrieve(unstored.id)


def test_bad_inputs_get_status_and_shape(oa: openai.OpenAI, an: anthropic.Anthropic, srv) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert "gpt-4o" in e.value.message and e.value.type == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as ae:
        an.messages.create(model=MODEL, max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert ae.value.body["type"] == "error"  # type: ignore[index]
    assert ae.value.request_id and ae.value.body["request_id"] == ae.value.request_id  # type: ignore[index]
    r = httpx.post(srv.base + "/v1/chat/completions", content=b"{nope", headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=srv.base, api_key="wrong", max_retries=0).messages.create(
            model=MODEL, max_tokens=1, messages=[{"role": "user", "content": "x"}])


def test_context_overflow_is_400(serve) -> None:  # type: ignore[no-untyped-def]
    small = EchoBackend(model=echo_model_card(MODEL, context_length=32))
    with serve(create_app(ServerConfig(), small)) as s:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 50}], max_tokens=4)
        assert "maximum context length is 32" in e.value.message
        assert e.value.code == "context_length_exceeded"


def test_disconnect_aborts_the_backend_request(serve) -> None:  # type: ignore[no-untyped-def]
    slow = EchoBackend(model=echo_model_card(MODEL), token_delay_s=0.05)
    with serve(create_app(ServerConfig(), slow)) as s:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "go on"}], "max_tokens": 2000,
                "stream": True, **NO_THINK}
        with httpx.stream("POST", s.base + "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            assert slow.stats().running == 1
        deadline = time.time() + 2
        while slow.stats().running and time.time() < deadline:
            time.sleep(0.01)
        assert slow.stats().running == 0
        # a non-stream request is aborted too when its client gives up
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.base + "/v1/chat/completions", json={**body, "stream": False}, timeout=0.3)
        deadline = time.time() + 2
        while slow.stats().running and time.time() < deadline:
            time.sleep(0.01)
        assert slow.stats().running == 0


def test_queue_full_is_429_with_retry_after_and_timeouts(serve) -> None:  # type: ignore[no-untyped-def]
    slow = EchoBackend(model=echo_model_card(MODEL), token_delay_s=0.05)
    with serve(create_app(ServerConfig(max_pending_requests=1, request_timeout_s=0.5), slow)) as s:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "busy"}], "max_tokens": 2000,
                "stream": True, **NO_THINK}
        with httpx.stream("POST", s.base + "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            next(lines)
            busy = httpx.post(s.base + "/v1/messages", json={**body, "stream": False})
            assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
            assert busy.json()["error"]["type"] == "rate_limit_error"
            rest = list(lines)  # the timeout closes the first stream with an error event
        assert any('"error"' in line for line in rest)
        timed = httpx.post(s.base + "/v1/chat/completions", json={**body, "stream": False})
        assert timed.status_code == 504 and timed.json()["error"]["code"] == "timeout"
        assert slow.stats().running == 0


def test_metrics_count_requests_and_tokens(oa: openai.OpenAI, srv) -> None:  # type: ignore[no-untyped-def]
    def scrape() -> dict[str, float]:
        text = httpx.get(srv.base + "/metrics").text
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if not s.labels.get("le") and "finished_reason" not in s.labels}

    before = scrape()
    for _ in range(3):
        oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "m"}], max_tokens=4,
                                   extra_body=NO_THINK)  # type: ignore[arg-type]
    after = scrape()
    assert after["recipe:e2e_request_latency_seconds_count"] - before["recipe:e2e_request_latency_seconds_count"] == 3
    assert after["recipe:generation_tokens_total"] - before["recipe:generation_tokens_total"] == 12
    assert after["recipe:time_to_first_token_seconds_count"] - before["recipe:time_to_first_token_seconds_count"] == 3


def test_stored_responses_survive_a_restart(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "r.sqlite3")
    with serve(create_app(ServerConfig(responses_db=db), EchoBackend(model=echo_model_card(MODEL)))) as s:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)
        first = c.responses.create(model=MODEL, input="Persist me", max_output_tokens=3, reasoning={"effort": "none"})
    with serve(create_app(ServerConfig(responses_db=db), EchoBackend(model=echo_model_card(MODEL)))) as s:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0)
        again = c.responses.retrieve(first.id)
        assert again.output_text == first.output_text
        nxt = c.responses.create(model=MODEL, input="More", previous_response_id=first.id, max_output_tokens=3,
                                 reasoning={"effort": "none"})
        assert nxt.output_text.startswith(first.output_text[:4])
