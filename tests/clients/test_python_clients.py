"""The Python agent clients, each a short exchange with the embedded demo model through `recipe serve`.

Every client runs as its users run it, in its own environment (.venv-clients), through its own classes;
what it returns is checked here: the structured outputs validate (the constraint made them so), the tool
loops ran the tool, the plain calls got text.
"""

from __future__ import annotations

from typing import Any

from client_servers import DEMO_MODEL, RecipeServer, run_python_client


def is_landmark(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"city", "country"} and all(
        isinstance(v, str) for v in value.values())


def test_openai_agents_sdk_runs_a_function_tool_on_both_model_classes(demo_server: RecipeServer) -> None:
    out = run_python_client("agents_sdk.py", demo_server, DEMO_MODEL)
    for kind in ("responses", "chat"):
        assert len(out[kind]["calls"]) == 1, out
        assert out[kind]["items"][:2] == ["tool_call_item", "tool_call_output_item"], out
        assert out[kind]["items"][-1] == "message_output_item", out


def test_pydantic_ai_structured_output_type(demo_server: RecipeServer) -> None:
    out = run_python_client("pydantic_ai_client.py", demo_server, DEMO_MODEL)
    assert set(out) == {"chat", "responses", "anthropic"}
    assert all(is_landmark(v) for v in out.values()), out


def test_langchain_chat_openai_and_chat_anthropic(demo_server: RecipeServer) -> None:
    out = run_python_client("langchain_client.py", demo_server, DEMO_MODEL)
    for kind in ("openai", "anthropic"):
        calls = out[kind]
        assert calls["invoke"].strip() and calls["stream"].strip(), calls
        assert [c["name"] for c in calls["tool_calls"]] == ["get_weather"], calls
        assert isinstance(calls["tool_calls"][0]["args"].get("city"), str), calls
        assert is_landmark(calls["structured"]), calls
    assert is_landmark(out["openai"]["structured_function_calling"])


def test_instructor_response_models(demo_server: RecipeServer) -> None:
    out = run_python_client("instructor_client.py", demo_server, DEMO_MODEL)
    assert set(out) == {"tool_call", "json_schema_mode", "anthropic_tools"}
    for person in out.values():
        assert isinstance(person["name"], str) and isinstance(person["age"], int), out


def test_litellm_as_a_client(demo_server: RecipeServer) -> None:
    out = run_python_client("litellm_client.py", demo_server, DEMO_MODEL)
    for provider in ("openai", "anthropic"):
        got = out[provider]
        assert got["text"] and got["stream"], got
        assert got["completion_tokens"] <= 24
        assert got["finish"] in ("stop", "length"), got
