"""`--close-within-limit` (`recipe.constraints.closing`) on the embedded demo model through the official SDKs: a
forced tool call or a JSON answer that would run past `max_tokens` ends complete and schema-valid, and with the
switch off the same greedy request is cut (the control that shows the test can fail)."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest
from recipe.server.app import create_app
from recipe.server.config import ServerConfig

MODEL = "SmolLM2-135M-Instruct"
KEY = "sk-close-test"
NOTE = {"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"},
                                         "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["title", "body"]}
PROMPT = "Write a very long, detailed note about the history of Rome, with many tags."


@pytest.fixture(scope="module", params=[True, False], ids=["closing", "off"])
def closing(request, serve, tmp_path_factory):  # type: ignore[no-untyped-def]
    from recipe.engine import AsyncLLM
    from recipe.server.engine_backend import EngineBackend

    db = tmp_path_factory.mktemp("close") / "responses.sqlite3"
    backend = EngineBackend(AsyncLLM("smollm2", max_num_seqs=4), name=MODEL)  # the app's shutdown stops it
    app = create_app(ServerConfig(api_keys=(KEY,), responses_db=str(db), close_within_limit=request.param), backend)
    with serve(app) as s:
        yield request.param, s


def test_forced_chat_tool_call(closing) -> None:  # type: ignore[no-untyped-def]
    on, srv = closing
    oa = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    tool = {"type": "function", "function": {"name": "save_note", "parameters": NOTE}}
    r = oa.chat.completions.create(model=MODEL, max_completion_tokens=60, temperature=0, tools=[tool],  # type: ignore[list-item]
                                   tool_choice={"type": "function", "function": {"name": "save_note"}},
                                   messages=[{"role": "user", "content": PROMPT}])
    choice = r.choices[0]
    if not on:
        assert choice.finish_reason == "length" and not choice.message.tool_calls
        return
    assert choice.finish_reason == "tool_calls", choice
    assert r.usage is not None and r.usage.completion_tokens <= 60
    jsonschema.validate(json.loads(choice.message.tool_calls[0].function.arguments), NOTE)  # type: ignore[index]


def test_forced_messages_tool_streamed(closing) -> None:  # type: ignore[no-untyped-def]
    on, srv = closing
    an = anthropic.Anthropic(base_url=srv.base, api_key=KEY, max_retries=0, timeout=120)
    with an.messages.stream(model=MODEL, max_tokens=60, extra_body={"temperature": 0},
                            tools=[{"name": "save_note", "input_schema": NOTE}],  # type: ignore[list-item, typeddict-item]
                            tool_choice={"type": "tool", "name": "save_note"},
                            messages=[{"role": "user", "content": PROMPT}]) as stream:
        message = stream.get_final_message()
    if not on:
        assert message.stop_reason == "max_tokens"
        return
    assert message.stop_reason == "tool_use", message
    (block,) = [b for b in message.content if b.type == "tool_use"]
    jsonschema.validate(block.input, NOTE)


def test_json_schema_answer(closing) -> None:  # type: ignore[no-untyped-def]
    on, srv = closing
    oa = openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    fmt = {"type": "json_schema", "json_schema": {"name": "note", "schema": NOTE}}
    r = oa.chat.completions.create(model=MODEL, max_tokens=60, temperature=0, response_format=fmt,  # type: ignore[arg-type]
                                   messages=[{"role": "user", "content": PROMPT}])
    choice = r.choices[0]
    if not on:
        assert choice.finish_reason == "length"
        return
    assert choice.finish_reason == "stop", choice.message.content
    jsonschema.validate(json.loads(choice.message.content or ""), NOTE)
