"""The rules of `recipe.protocols.leniency`, each as an equality with the reference's own conversion.

Every rule is stated as "the default conversion of body B equals the strict (reference) conversion of a
rewritten body B'", over bodies drawn by the golden generators (random models, messages, tools, ids), so
the rule changes exactly what it says and nothing else. Bodies that meet no rule are compared
lenient-vs-strict in `conftest.reference_diff` on every generated and golden body.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.codec import ConversionOptions, convert, render
from recipe.errors import RequestError

from .conftest import STRICT, conversion_view, lenient_triggers

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TOOL = {"name": "pick", "description": "choose", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}


def outcome(api: str, body: dict[str, Any], options: ConversionOptions | None) -> tuple[Any, ...]:
    try:
        req = convert(api, copy.deepcopy(body), options)
    except RequestError as exc:
        return ("error", exc.status, exc.message)
    return ("ok", conversion_view(req), render(req).prompt)


def body_of(make_vectors: Any, api: str, seed: int) -> dict[str, Any]:
    """A generated body that meets no rule by itself (the generator sends `max_completion_tokens` and
    `output_format`, which the reference ignores, at times)."""
    body = make_vectors.GENERATORS[api](random.Random(seed))
    assert isinstance(body, dict)
    body.pop("max_completion_tokens", None)
    body.pop("output_format", None)
    if "forced tool choice" in lenient_triggers(api, json.dumps(body)):
        body = thinking_disabled(api, body)  # then the reference accepts it too
    return body


def with_tool(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The body with the tool `pick` declared (beside whatever tools it has)."""
    if api == "chat":
        tool: dict[str, Any] = {"type": "function", "function": {"name": "pick", "description": TOOL["description"],
                                                                 "parameters": TOOL["schema"]}}
    elif api == "messages":
        tool = {"name": "pick", "description": TOOL["description"], "input_schema": TOOL["schema"]}
    else:
        tool = {"type": "function", "name": "pick", "description": TOOL["description"], "parameters": TOOL["schema"]}
    tools = [t for t in (body.get("tools") or []) if "pick" not in json.dumps(t)]
    return {**body, "tools": [*tools, tool]}


FORCED = {
    "chat": ["required", {"type": "function", "function": {"name": "pick"}}],
    "messages": [{"type": "tool", "name": "pick"}],
    "responses": ["required", {"type": "function", "name": "pick"}],
}


def thinking_disabled(api: str, body: dict[str, Any]) -> dict[str, Any]:
    if api == "responses":
        return {**body, "reasoning": {**(body.get("reasoning") or {}), "effort": "none"}}
    return {**body, "thinking": {"type": "disabled"}}


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), api=st.sampled_from(["chat", "messages", "responses"]), pick=st.integers(0, 1),
       thinking=st.sampled_from([None, "enabled"]))
def test_a_forced_tool_choice_turns_thinking_off(make_vectors: Any, seed: int, api: str, pick: int,
                                                 thinking: str | None) -> None:
    body = with_tool(api, body_of(make_vectors, api, seed))
    choices = FORCED[api]
    body["tool_choice"] = choices[pick % len(choices)]
    if thinking and api != "responses":
        body["thinking"] = {"type": thinking}
    assert "forced tool choice" in lenient_triggers(api, json.dumps(body))
    assert outcome(api, body, None) == outcome(api, thinking_disabled(api, body), STRICT)
    strict = outcome(api, body, STRICT)
    if thinking and strict[0] == "error" and outcome(api, body, None)[0] == "ok":
        assert strict[2] == "Thinking mode does not support this tool_choice"


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_messages_tool_choice_any_requires_a_call_without_thinking(make_vectors: Any, seed: int) -> None:
    body = with_tool("messages", body_of(make_vectors, "messages", seed))
    body["tool_choice"] = {"type": "any"}
    try:
        req = convert("messages", body)
    except RequestError as exc:  # the same body rejects the same way with the reference's reading of `any`
        assert outcome("messages", thinking_disabled("messages", body), STRICT) == ("error", exc.status, exc.message)
        return
    assert req.conversation.thinking_mode is False
    assert req.conversation.tool_choice == "required"
    assert req.inference_options.output_constraint is not None
    assert req.inference_options.output_constraint.kind == "tool_call_required"
    assert req.parsing_options.starts_in_tool_calls
    # The reference reads `any` as `auto`: that is the one field that differs from its conversion.
    auto = outcome("messages", {**thinking_disabled("messages", body), "tool_choice": {"type": "auto"}}, STRICT)
    assert auto[0] == "ok"
    ours = conversion_view(req)
    assert ours["conversation"]["messages"] == auto[1]["conversation"]["messages"]
    assert [t["name"] for t in ours["conversation"]["tools"]] == [t["name"] for t in auto[1]["conversation"]["tools"]]


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), where=st.randoms(use_true_random=False))
def test_developer_messages_are_system_messages(make_vectors: Any, seed: int, where: random.Random) -> None:
    body = body_of(make_vectors, "chat", seed)
    messages = list(body["messages"])
    messages.insert(where.randrange(len(messages) + 1), {"role": "system", "content": "Be brief."})
    as_system = {**body, "messages": messages}
    as_developer = {**body, "messages": [{**m, "role": "developer"} if m.get("role") == "system" else m for m in messages]}
    assert outcome("chat", as_developer, None) == outcome("chat", as_system, STRICT)
    assert outcome("chat", as_developer, STRICT)[0] == "error"  # the reference has no `developer` role


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), where=st.randoms(use_true_random=False))
def test_redacted_thinking_blocks_are_dropped(make_vectors: Any, seed: int, where: random.Random) -> None:
    body = body_of(make_vectors, "messages", seed)
    messages = [
        {**m, "content": [{"type": "text", "text": m["content"]}]}
        if m.get("role") == "assistant" and isinstance(m.get("content"), str) else m
        for m in body["messages"]
    ]
    with_blocks = []
    inserted = 0
    for m in messages:
        if m.get("role") == "assistant" and isinstance(m.get("content"), list):
            blocks = list(m["content"])
            blocks.insert(where.randrange(len(blocks) + 1), {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})
            inserted += 1
            m = {**m, "content": blocks}
        with_blocks.append(m)
    plain = {**body, "messages": messages}
    redacted = {**body, "messages": with_blocks}
    assert outcome("messages", redacted, None) == outcome("messages", plain, None)
    if inserted:
        assert outcome("messages", redacted, STRICT)[0] == "error"
        assert outcome("messages", plain, None) == outcome("messages", plain, STRICT) or lenient_triggers(
            "messages", json.dumps(plain))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), limit=st.integers(1, 5000))
def test_max_completion_tokens_is_the_completion_limit(make_vectors: Any, seed: int, limit: int) -> None:
    body = body_of(make_vectors, "chat", seed)
    asked = body.get("max_tokens")
    expected = limit if asked is None else min(asked, limit)
    assert outcome("chat", {**body, "max_completion_tokens": limit}, None) == outcome(
        "chat", {**body, "max_tokens": expected}, STRICT
    )
    # The reference ignores the field.
    assert outcome("chat", {**body, "max_completion_tokens": limit}, STRICT) == outcome("chat", body, STRICT)


SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
    {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
]


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), schema=st.sampled_from(SCHEMAS), beta=st.booleans())
def test_messages_output_format_constrains_the_output(make_vectors: Any, seed: int, schema: dict[str, Any],
                                                      beta: bool) -> None:
    body = body_of(make_vectors, "messages", seed)
    body.pop("tools", None)
    body.pop("tool_choice", None)
    fmt = {"type": "json_schema", "schema": schema}
    config = {**(body.get("output_config") or {}), "format": fmt}
    shaped = {**body, "output_format": fmt} if beta else {**body, "output_config": config}
    try:
        req = convert("messages", shaped)
    except RequestError as exc:
        assert outcome("messages", body, None) == ("error", exc.status, exc.message)
        return
    plain = convert("messages", body)
    assert req.conversation.response_format == "json_schema"
    assert req.conversation.response_schema == schema
    assert req.inference_options.output_constraint is not None
    assert req.inference_options.output_constraint.kind == "json"
    assert json.loads(req.inference_options.output_constraint.schema) == schema
    assert req.conversation.messages == plain.conversation.messages
    assert outcome("messages", shaped, STRICT) == outcome("messages", body, STRICT)  # the reference ignores it


@pytest.mark.parametrize("fmt", [{"type": "text"}, {"type": "json_schema"}, {"type": "json_schema", "schema": 3}, "x"])
def test_a_bad_messages_output_format_is_a_400(fmt: Any) -> None:
    body = {"model": "DeepSeek-V4-Pro", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "output_config": {"format": fmt}}
    with pytest.raises(RequestError) as info:
        convert("messages", body)
    assert info.value.status == 400
    assert "output_config.format" in info.value.message


def test_strict_reference_keeps_the_reference_error() -> None:
    body = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
    with pytest.raises(RequestError, match="Thinking mode does not support this tool_choice"):
        convert("chat", body, ConversionOptions(strict_reference=True))
    req = convert("chat", body)
    assert not req.conversation.thinking_mode and req.conversation.tool_choice == "required"


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(1, 400), limit=st.integers(1, 400), asked=st.one_of(st.none(), st.integers(1, 1000)))
def test_a_completion_limit_past_the_context_is_lowered_to_the_room_left(prompt: int, limit: int,
                                                                        asked: int | None) -> None:
    from recipe.codec import default_max_tokens, resolve_max_tokens

    body: dict[str, Any] = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "hi"}]}
    if asked is not None:
        body["max_tokens"] = asked
    req = convert("chat", body)
    if prompt >= limit:
        with pytest.raises(RequestError) as info:
            resolve_max_tokens(req, prompt, limit, clamp_to_context=True)
        assert info.value.status == 400
        return
    wanted = asked if asked is not None else default_max_tokens(req)
    assert resolve_max_tokens(req, prompt, limit, clamp_to_context=True) == min(wanted, limit - prompt)
    if asked is not None and prompt + asked > limit:  # the reference's rule rejects it
        with pytest.raises(RequestError):
            resolve_max_tokens(req, prompt, limit)
