"""Fields and probes real clients send, through the server (echo backend, DeepSeek V4 prompt format).

Each test names the client behaviour it stands for: forced tool choice with thinking on (Agents SDK
`required`, pydantic-ai, LangChain `with_structured_output`, instructor), Chat `max_completion_tokens`
(current OpenAI SDKs), Messages `output_config.format`, HEAD probes, a reply that ends with a normal stop.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, echo_model_card
from recipe.server.config import ServerConfig
from recording_backend import RecordingEcho

MODEL = "DeepSeek-V4-Pro"
HI = [{"role": "user", "content": "Hello there"}]
CHAT_TOOL = {"type": "function", "function": {"name": "pick", "parameters": {"type": "object",
                                                                          "properties": {"n": {"type": "integer"}}}}}
MESSAGES_TOOL = {"name": "pick", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
RESPONSES_TOOL = {"type": "function", "name": "pick", "parameters": {"type": "object",
                                                                   "properties": {"n": {"type": "integer"}}}}


def client(**config: Any) -> TestClient:
    backend = EchoBackend(model=echo_model_card(MODEL), mode="reply")
    return TestClient(create_app(ServerConfig(**config), backend))


def recording(field: str, **config: Any) -> tuple[TestClient, RecordingEcho]:
    backend = RecordingEcho(MODEL, field)
    return TestClient(create_app(ServerConfig(**config), backend)), backend


FORCED = [
    ("chat", "/v1/chat/completions", {"messages": HI, "tools": [CHAT_TOOL], "tool_choice": "required"}),
    ("chat", "/v1/chat/completions", {"messages": HI, "tools": [CHAT_TOOL],
                                      "tool_choice": {"type": "function", "function": {"name": "pick"}}}),
    ("messages", "/v1/messages", {"messages": HI, "max_tokens": 64, "tools": [MESSAGES_TOOL],
                                  "tool_choice": {"type": "tool", "name": "pick"}}),
    ("messages", "/v1/messages", {"messages": HI, "max_tokens": 64, "tools": [MESSAGES_TOOL],
                                  "tool_choice": {"type": "any"}, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ("responses", "/v1/responses", {"input": "Hello there", "tools": [RESPONSES_TOOL], "tool_choice": "required"}),
    ("responses", "/v1/responses", {"input": "Hello there", "tools": [RESPONSES_TOOL],
                                    "tool_choice": {"type": "function", "name": "pick"}}),
]


@pytest.mark.parametrize(("api", "path", "body"), FORCED)
def test_a_forced_tool_choice_is_served_without_thinking(api: str, path: str, body: dict[str, Any]) -> None:
    c, backend = recording("constraint")
    r = c.post(path, json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    assert backend.seen[-1] is not None  # the tool-call constraint is applied
    out = r.json()
    if api == "chat":
        assert "reasoning_content" not in out["choices"][0]["message"]
    elif api == "messages":
        assert [b for b in out["content"] if b["type"] == "thinking"] == []
    else:
        assert [i for i in out["output"] if i["type"] == "reasoning"] == []
    strict, _ = recording("constraint", strict_reference=True)
    r = strict.post(path, json={"model": MODEL, **body})
    if api == "messages" and body["tool_choice"]["type"] == "any":
        assert r.status_code == 200  # the reference reads `any` as `auto`
        return
    assert r.status_code == 400
    err = r.json()
    message = err["error"]["message"]
    assert message == "Thinking mode does not support this tool_choice"
    if api == "messages":
        assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"


def test_max_completion_tokens_limits_the_completion() -> None:
    c, backend = recording("max_tokens")
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_completion_tokens": 2})
    assert r.status_code == 200
    assert backend.seen == [2]
    assert r.json()["usage"]["completion_tokens"] == 2
    assert r.json()["choices"][0]["finish_reason"] == "length"
    strict, backend = recording("max_tokens", strict_reference=True)
    strict.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_completion_tokens": 2})
    assert backend.seen[-1] > 2  # the reference ignores the field


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": HI}),
    ("/v1/chat/completions", {"messages": HI, "max_tokens": 100_000}),
    ("/v1/messages", {"messages": HI, "max_tokens": 100_000}),
    ("/v1/responses", {"input": "hi"}),
])
def test_the_server_caps_every_request(path: str, body: dict[str, Any]) -> None:
    c, backend = recording("max_tokens", max_output_tokens=7)
    assert c.post(path, json={"model": MODEL, **body}).status_code == 200
    assert backend.seen == [7]


def test_messages_output_config_format_becomes_a_json_constraint() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
    c, backend = recording("constraint")
    body = {"model": MODEL, "max_tokens": 16, "messages": HI,
            "output_config": {"format": {"type": "json_schema", "schema": schema}}}
    assert c.post("/v1/messages", json=body).status_code == 200
    assert backend.seen[-1] is not None
    bad = c.post("/v1/messages", json={**body, "output_config": {"format": {"type": "json_schema"}}})
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    strict, backend = recording("constraint", strict_reference=True)
    assert strict.post("/v1/messages", json=body).status_code == 200
    assert backend.seen[-1] is None  # the reference ignores the field


def test_echo_reply_answers_the_last_user_turn_and_stops() -> None:
    c = client()
    r = c.post("/v1/messages", json={"model": MODEL, "max_tokens": 100, "messages": HI})
    assert r.json()["stop_reason"] == "end_turn"
    assert [b["text"] for b in r.json()["content"] if b["type"] == "text"] == ["Hello there"]
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "thinking": {"type": "disabled"}})
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    assert r.json()["choices"][0]["message"]["content"] == "Hello there"
    r = c.post("/v1/responses", json={"model": MODEL, "input": "Hello there", "stream": True})
    assert '"status":"completed"' in r.text and "Hello there" in r.text
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_tokens": 1})
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_head_answers_wherever_get_does() -> None:
    c = client()
    routes = ["/", "/v1/models", f"/v1/models/{MODEL}", "/v1/models/nope", "/health", "/version", "/metrics",
              "/v1/responses/resp_missing", "/playground"]
    for path in routes:
        get, head = c.get(path), c.head(path)
        assert head.status_code == get.status_code, path
        assert head.content == b"", path
    assert c.head("/v1/models", headers={"anthropic-version": "2023-06-01"}).status_code == 200
    assert c.get("/").json()["models"] == [MODEL]
    assert c.head("/v1/chat/completions").status_code == 405


def test_default_thinking_mode_is_a_server_choice() -> None:
    c = client(default_thinking_mode=False)
    r = c.post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
    assert "reasoning_content" not in r.json()["choices"][0]["message"]
    on = client(default_thinking_mode=True).post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
    assert "reasoning_content" in on.json()["choices"][0]["message"]


def test_a_completion_limit_past_the_context_is_lowered_unless_strict() -> None:
    small = EchoBackend(model=echo_model_card(MODEL, context_length=120), mode="repeat")
    body = {"model": MODEL, "max_tokens": 32000, "messages": HI, "thinking": {"type": "disabled"}}
    r = TestClient(create_app(ServerConfig(), small)).post("/v1/messages", json=body)
    assert r.status_code == 200 and r.json()["stop_reason"] == "max_tokens"
    assert r.json()["usage"]["input_tokens"] + r.json()["usage"]["output_tokens"] == 120
    strict = TestClient(create_app(ServerConfig(strict_reference=True), small)).post("/v1/messages", json=body)
    assert strict.status_code == 400 and "maximum context length" in strict.json()["error"]["message"]


def dsml_calls(calls: list[tuple[str, str]]) -> str:
    """Text that the echo speaks as DSML tool calls: `(tool name, value of its string parameter "a")`."""
    invokes = "".join(f'<｜DSML｜invoke name="{name}">\n<｜DSML｜parameter name="a" string="true">{value}'
                      f'</｜DSML｜parameter>\n</｜DSML｜invoke>\n' for name, value in calls)
    return f"<｜DSML｜tool_calls>\n{invokes}</｜DSML｜tool_calls>"


def sse(text: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]


@settings(max_examples=25, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from(["get", "put"]),
                                st.text(st.characters(codec="utf-8", exclude_characters="<>\x00"), min_size=1,
                                        max_size=12)),
                      min_size=1, max_size=3))
def test_stream_events_agree_with_the_final_object(calls: list[tuple[str, str]]) -> None:
    import json

    c = client()
    text = dsml_calls(calls)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    # Responses: the items' ids and arguments in the events equal those of response.completed.
    body = {"model": MODEL, "input": text, "stream": True,
            "tools": [{"type": "function", "name": n, "parameters": schema} for n in ("get", "put")]}
    events = sse(c.post("/v1/responses", json=body).text)
    final = next(e for e in events if e["type"] == "response.completed")["response"]["output"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["id"] for i in done] == [i["id"] for i in final]
    assert [i["arguments"] for i in done if i["type"] == "function_call"] == [
        e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done"]
    calls_out = [i for i in final if i["type"] == "function_call"]
    assert [(i["name"], json.loads(i["arguments"])["a"]) for i in calls_out] == calls
    # Messages: a tool_use starts with an empty input; its input arrives only through input_json_delta.
    body = {"model": MODEL, "max_tokens": 400, "messages": [{"role": "user", "content": text}], "stream": True,
            "tools": [{"name": n, "input_schema": schema} for n in ("get", "put")]}
    events = sse(c.post("/v1/messages", json=body).text)
    starts = {e["index"]: e["content_block"] for e in events if e["type"] == "content_block_start"}
    uses = {i: b for i, b in starts.items() if b["type"] == "tool_use"}
    assert all(b["input"] == {} for b in uses.values())
    deltas = {i: "" for i in uses}
    for e in events:
        if e["type"] == "content_block_delta" and e["index"] in uses:
            assert e["delta"]["type"] == "input_json_delta"
            deltas[e["index"]] += e["delta"]["partial_json"]
    assert [(uses[i]["name"], json.loads(deltas[i])["a"]) for i in sorted(uses)] == calls
    # Chat: the argument deltas of each call join into its arguments.
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": True,
            "tools": [{"type": "function", "function": {"name": n, "parameters": schema}} for n in ("get", "put")]}
    joined: dict[int, str] = {}
    for e in sse(c.post("/v1/chat/completions", json=body).text):
        for call in (e["choices"][0]["delta"].get("tool_calls") or []) if e.get("choices") else []:
            joined[call["index"]] = joined.get(call["index"], "") + (call.get("function", {}).get("arguments") or "")
    assert [json.loads(joined[i])["a"] for i in sorted(joined)] == [v for _, v in calls]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/messages", {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"},
                                                    {"role": "system", "content": "Environment notes."}]}),
    ("/v1/messages", {"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "text", "text": ""}, {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": "   "}]}],
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": "u"}, "context_management": {"edits": []}, "thinking": {"type": "adaptive"}}),
    ("/v1/messages", {"max_tokens": 8, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "sig"},
                                          {"type": "redacted_thinking", "data": "opaque"},
                                          {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "developer", "content": "Be brief."},
                                           {"role": "user", "content": "hi"},
                                           {"role": "assistant", "content": "a", "reasoning_content": "r"},
                                           {"role": "user", "content": "again"}],
                              "parallel_tool_calls": False, "store": False, "metadata": {"k": "v"}}),
    ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                                 {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
                                 {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
                                 {"role": "user", "content": "again"}],
                       "include": ["reasoning.encrypted_content"], "store": False, "prompt_cache_key": "k",
                       "parallel_tool_calls": True, "text": {"verbosity": "low"}, "reasoning": {"summary": "auto"},
                       "tools": [{"type": "web_search"}, RESPONSES_TOOL]}),
])
def test_what_current_clients_send_is_accepted(path: str, body: dict[str, Any]) -> None:
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14,prompt-caching"}
    r = client().post(path, json={"model": MODEL, **body}, headers=headers)
    assert r.status_code == 200, r.text


def test_count_tokens_equals_the_generation_prompt() -> None:
    c = client()
    body = {"model": MODEL, "messages": HI, "system": "s", "tools": [MESSAGES_TOOL]}
    counted = c.post("/v1/messages/count_tokens", json=body, headers={"anthropic-beta": "token-counting-2024-11-01"})
    made = c.post("/v1/messages", json={**body, "max_tokens": 4})
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] == made.json()["usage"]["input_tokens"]


@pytest.mark.parametrize("fmt", ["dsml_v4", "chatml"])
def test_namespaced_tools_compile_into_a_tool_call_constraint(fmt: str) -> None:
    """Codex declares `namespace` tools; under V4.1's rules (which the ChatML demo model converts by) the codec
    names their functions `ns::name`, as the reference does."""
    from recipe.codec import convert
    from recipe.constraints.tool_call import tool_call_lark
    from recipe.tokenizer import load_deepseek_v4_tokenizer

    body = {"model": "DeepSeek-V4.1-Flash", "input": "hi", "tools": [
        {"type": "namespace", "name": "multi_agent_v1", "description": "agents",
         "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}}]}]}
    oc = convert("responses", body).inference_options.output_constraint
    assert oc is not None and "multi_agent_v1::close_agent" in oc.schema
    grammar = tool_call_lark(oc.schema, load_deepseek_v4_tokenizer(), fmt=fmt)  # type: ignore[arg-type]
    assert "multi_agent_v1::close_agent" in grammar
