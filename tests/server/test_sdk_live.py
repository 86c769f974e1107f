"""The official `openai` and `anthropic` SDKs against a live server on the embedded demo model
(SmolLM2-135M-Instruct, ChatML), started once for this module on a free loopback port.

Token counts are kept small: the demo model makes a few dozen tokens per second on a shared CPU.
"""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import jsonschema
import openai
import pytest
from recipe.server.app import create_app
from recipe.server.config import ServerConfig

MODEL = "SmolLM2-135M-Instruct"
KEY = "sk-live-test"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}},
                       "required": ["city"], "additionalProperties": False},
    },
}
CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine_backend():  # type: ignore[no-untyped-def]
    from recipe.engine import AsyncLLM
    from recipe.server.engine_backend import EngineBackend

    return EngineBackend(AsyncLLM("smollm2", max_num_seqs=8), name=MODEL)


@pytest.fixture(scope="module")
def srv(engine_backend, serve, tmp_path_factory):  # type: ignore[no-untyped-def]
    db = tmp_path_factory.mktemp("live") / "responses.sqlite3"
    app = create_app(ServerConfig(api_keys=(KEY,), responses_db=str(db)), engine_backend)
    with serve(app) as s:
        yield s


@pytest.fixture(scope="module")
def oa(srv) -> openai.OpenAI:  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def an(srv) -> anthropic.Anthropic:  # type: ignore[no-untyped-def]
    return anthropic.Anthropic(base_url=srv.base, api_key=KEY, max_retries=0, timeout=120)


def test_models_and_auth(oa: openai.OpenAI, srv) -> None:  # type: ignore[no-untyped-def]
    assert [m.id for m in oa.models.list()] == [MODEL]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=srv.base + "/v1", api_key="nope", max_retries=0).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=srv.base, api_key="nope", max_retries=0).messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "x"}])
    # old-style Anthropic clients send x-api-key
    r = httpx.post(srv.base + "/v1/messages/count_tokens?beta=true", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                   json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0


def test_chat_create_and_stream_match_at_temperature_zero(oa: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    r = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)  # type: ignore[arg-type]
    text = r.choices[0].message.content
    assert text and "Paris" in text
    assert r.usage is not None and r.usage.completion_tokens <= 8
    stream = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0, stream=True)  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text


def test_chat_logprobs_and_stop(oa: openai.OpenAI) -> None:
    msgs = [{"role": "user", "content": "Count from 1 to 9 separated by commas."}]
    r = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=6, temperature=0, logprobs=True,  # type: ignore[arg-type]
                                   top_logprobs=2)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.content and all(len(t.top_logprobs) == 2 for t in lp.content)
    assert "".join(t.token for t in lp.content) == r.choices[0].message.content
    stopped = oa.chat.completions.create(model=MODEL, messages=msgs, max_tokens=24, temperature=0, stop=["3"])  # type: ignore[arg-type]
    assert stopped.choices[0].finish_reason == "stop" and "3" not in (stopped.choices[0].message.content or "")


def test_json_schema_output_is_valid_on_every_try(oa: openai.OpenAI) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": CITY_SCHEMA, "strict": True}}
    # seeded: unseeded, one default-suite run drew whitespace inside the object (which the schema allows) until
    # max_tokens, and that try ended by length, not by the constraint
    for seed in range(3):
        r = oa.chat.completions.create(model=MODEL, max_tokens=64, temperature=1.0, response_format=fmt, seed=seed,  # type: ignore[arg-type]
                                       messages=[{"role": "user", "content": "Weather in Rome as JSON."}])
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content  # the constraint ended it
        jsonschema.validate(json.loads(r.choices[0].message.content or ""), CITY_SCHEMA)


def test_stream_helper_with_required_tool(oa: openai.OpenAI) -> None:
    # With tool_choice "required" the constraint admits several calls and the small model keeps calling
    # until max_tokens, so the helper's events are read rather than get_final_completion() (which refuses
    # any completion cut by length): the first call must be complete and valid against the tool's schema.
    msgs = [{"role": "user", "content": "What's the weather in Oslo?"}]
    kinds = set()
    with oa.chat.completions.stream(model=MODEL, messages=msgs, tools=[WEATHER_TOOL], tool_choice="required",  # type: ignore[arg-type]
                                    max_tokens=48, temperature=0) as stream:
        for event in stream:
            kinds.add(event.type)
            assert event.type != "content.delta" or not event.delta.strip()
        snapshot = stream.current_completion_snapshot
    assert "tool_calls.function.arguments.delta" in kinds
    call = (snapshot.choices[0].message.tool_calls or [])[0]
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])  # type: ignore[index]


def test_responses_create_stream_retrieve_continue(oa: openai.OpenAI) -> None:
    first = oa.responses.create(model=MODEL, input="My name is Ada. Say hi.", max_output_tokens=8, temperature=0)
    assert first.output_text and first.status in ("completed", "incomplete")
    assert oa.responses.retrieve(first.id).output_text == first.output_text
    with oa.responses.stream(model=MODEL, input="What is my name?", previous_response_id=first.id,
                             max_output_tokens=8, temperature=0) as s:
        events = list(s)  # get_final_response() insists on response.completed; a cut answer is incomplete
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    second = events[-1].response  # type: ignore[union-attr]
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens - 1
    assert oa.responses.retrieve(second.id).previous_response_id == first.id


def _wait_idle(engine_backend, seconds: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    """Until the engine runs and queues no request (an earlier client's may still be finishing); fails rather than
    going on beside one (with a 5 s limit and no check, a default-suite run under a concurrent build read 4 tokens
    against 3 below; a request still beside it is the likely cause, not established)."""
    deadline = time.time() + seconds
    while (stats := engine_backend.stats()).running or stats.waiting:
        assert time.time() < deadline, f"the engine is still busy after {seconds} s: {stats}"
        time.sleep(0.02)


def test_messages_create_stream_tools_thinking_and_count(an: anthropic.Anthropic, engine_backend) -> None:  # type: ignore[no-untyped-def]
    base = {"model": MODEL, "max_tokens": 4, "extra_body": {"temperature": 0.0},
            "messages": [{"role": "user", "content": "Name a color."}]}
    # greedy only without thinking: with thinking enabled the codec sends temperature 1 whatever the request says
    # (codec-spec §1.4, as the official reference does), and Messages has no seed, so those two calls are two
    # unseeded samples (one default-suite run read 3 output tokens against 4) and only their shape is compared
    for thinking in ({"type": "disabled"}, {"type": "enabled", "budget_tokens": 1024}):
        _wait_idle(engine_backend)  # each greedy run alone in the engine: the layered path's products depend on the batch
        m = an.messages.create(**base, thinking=thinking)  # type: ignore[call-overload]
        assert m.role == "assistant" and m.stop_reason in ("end_turn", "max_tokens")
        _wait_idle(engine_backend)
        with an.messages.stream(**base, thinking=thinking) as s:  # type: ignore[call-overload]
            final = s.get_final_message()
        assert final.role == "assistant" and final.stop_reason in ("end_turn", "max_tokens")
        assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == \
            m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
        if thinking["type"] == "disabled":
            assert [(b.type, getattr(b, "text", None)) for b in final.content] == \
                [(b.type, getattr(b, "text", None)) for b in m.content]
            assert final.usage.output_tokens == m.usage.output_tokens
        else:
            assert {b.type for b in final.content + m.content} <= {"text", "thinking"}
            assert final.usage.output_tokens <= 4 and m.usage.output_tokens <= 4
    count = an.messages.count_tokens(model=MODEL, messages=base["messages"])  # type: ignore[arg-type]
    assert count.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    tool = {"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER_TOOL["function"]["parameters"]}  # type: ignore[index]
    t = an.messages.create(model=MODEL, max_tokens=48, extra_body={"temperature": 0.0}, tools=[tool],  # type: ignore[list-item]
                           tool_choice={"type": "tool", "name": "get_weather"},
                           messages=[{"role": "user", "content": "Weather in Lima?"}])
    uses = [b for b in t.content if b.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and t.stop_reason in ("tool_use", "max_tokens")
    jsonschema.validate(uses[0].input, tool["input_schema"])  # type: ignore[arg-type]


def test_disconnect_frees_the_engine_request(srv, engine_backend) -> None:  # type: ignore[no-untyped-def]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", srv.base + "/v1/chat/completions", json=body,
                      headers={"authorization": f"Bearer {KEY}"}, timeout=60) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        assert engine_backend.stats().running == 1
    _wait_idle(engine_backend)
    assert engine_backend.stats().running == 0 and engine_backend.stats().waiting == 0


def test_metrics_read_the_engine(srv) -> None:  # type: ignore[no-untyped-def]
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(srv.base + "/metrics").text  # public: no key needed for scrapes
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
              if "le" not in s.labels and "finished_reason" not in s.labels}
    assert values["recipe:prefix_cache_queries_total"] > 0  # the engine's own counter, read at scrape time
    assert values["recipe:prefix_cache_hits_total"] <= values["recipe:prefix_cache_queries_total"]
    assert values["recipe:num_requests_running"] == 0 and 0 <= values["recipe:kv_cache_usage_perc"] <= 1
    assert values["recipe:generation_tokens_total"] > 0 and values["recipe:time_to_first_token_seconds_count"] > 0
