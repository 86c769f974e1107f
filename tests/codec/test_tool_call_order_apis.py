"""Tool-call order through the three APIs equals the official reference's: conversion, prompt, special
ranges, token ids and errors, for call ids drawn at random (the golden set only ever used ids in order).

V4 renders a turn's calls sorted by id with the results in that order (all APIs); V4.1 keeps request
order, except that Responses conversion itself lists a turn's calls by id (both versions).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.codec import convert, render

V4 = "DeepSeek-V4-Pro"
V41 = "DeepSeek-V4.1-Flash"
MODELS = [V4, V41]


def chat(model: str, rounds: list[tuple[list[str], list[str]]]) -> dict[str, Any]:
    """A Chat body: per round, an assistant turn calling `ids` and the results in `results` order."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Q"}]
    for r, (ids, results) in enumerate(rounds):
        calls = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": json.dumps({"n": f"{r}.{k}"})}}
            for k, i in enumerate(ids)
        ]
        msgs.append({"role": "assistant", "content": None, "reasoning_content": "R", "tool_calls": calls})
        msgs += [{"role": "tool", "tool_call_id": i, "content": f"result {i}"} for i in results]
    msgs.append({"role": "user", "content": "and?"})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    return {"model": model, "messages": msgs, "tools": tools}


def messages(model: str, rounds: list[tuple[list[str], list[str]]]) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Q"}]
    for r, (ids, results) in enumerate(rounds):
        msgs.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": i, "name": "f", "input": {"n": f"{r}.{k}"}} for k, i in enumerate(ids)],
            }
        )
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": f"result {i}"} for i in results]})
    msgs[-1]["content"].append({"type": "text", "text": "and?"})
    return {"model": model, "max_tokens": 64, "messages": msgs, "tools": [{"name": "f", "input_schema": {"type": "object"}}]}


def responses(model: str, rounds: list[tuple[list[str], list[str]]]) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Q"}]
    for r, (ids, results) in enumerate(rounds):
        items += [
            {"type": "function_call", "call_id": i, "name": "f", "arguments": json.dumps({"n": f"{r}.{k}"})}
            for k, i in enumerate(ids)
        ]
        items += [{"type": "function_call_output", "call_id": i, "output": f"result {i}"} for i in results]
    items.append({"role": "user", "content": "and?"})
    return {"model": model, "input": items, "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}


BODIES = {"chat": chat, "messages": messages, "responses": responses}

HAND = {
    "two-out-of-order": [(["call_b", "call_a"], ["call_b", "call_a"])],
    "results-in-a-third-order": [(["c", "a", "b"], ["b", "c", "a"])],
    "numbers-as-strings": [(["call_9", "call_10", "call_1", "call_100"], ["call_1", "call_100", "call_9", "call_10"])],
    "mixed-styles": [
        (["toolu_01XyZ", "call_abc123", "fc_68a0", "Z9", "0", "é", "😀"], ["😀", "0", "fc_68a0", "toolu_01XyZ", "é", "Z9", "call_abc123"])
    ],
    "two-rounds": [(["y", "x"], ["x", "y"]), (["b", "c", "a"], ["c", "a", "b"])],
    "case-and-prefixes": [(["ab", "a", "B", "abc"], ["abc", "B", "a", "ab"])],
}


def test_issue_example_v4_chat() -> None:
    """`call_b` then `call_a`: `a`'s invoke first, then `b`'s, then the results of `a` and of `b`."""
    prompt = render(convert("chat", json.dumps(chat(V4, HAND["two-out-of-order"])))).prompt
    assert prompt.index('"n" string="true">0.1<') < prompt.index('"n" string="true">0.0<')
    assert prompt.index("result call_a") < prompt.index("result call_b")


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("api", sorted(BODIES))
@pytest.mark.parametrize("case", sorted(HAND))
def test_hand_orders_match_reference(reference_diff: Any, api: str, model: str, case: str) -> None:
    text = json.dumps(BODIES[api](model, HAND[case]), ensure_ascii=False)
    assert reference_diff(api, text) is None, reference_diff(api, text)


def fc(i: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"}


def fo(i: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": i, "output": f"result {i}"}


RESPONSES_ITEMS = {
    "call-joins-while-one-is-unanswered": [fc("b"), fc("a"), fo("a"), fc("c"), fo("b"), fo("c")],
    "new-turn-once-all-answered": [fc("b"), fo("b"), fc("a"), fo("a")],
    "custom-and-function-calls": [
        fc("m"),
        {"type": "custom_tool_call", "call_id": "a", "name": "apply_patch", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "a", "output": "done"},
        fo("m"),
    ],
    "assistant-text-then-calls": [{"role": "assistant", "content": "pre"}, fc("z"), fc("y"), fo("z"), fo("y"), {"role": "assistant", "content": "post"}],
    "duplicate-call-id": [fc("a"), fo("a"), {"role": "assistant", "content": "x"}, fc("a"), fo("a")],
    "duplicate-call-id-before-unknown-output": [fc("a"), fc("a"), fo("zz")],
    "empty-call-id": [fc(""), fo("")],
    "custom-repeats-function-id": [fc("a"), {"type": "custom_tool_call", "call_id": "a", "name": "apply_patch", "input": "x"}],
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", sorted(RESPONSES_ITEMS))
def test_responses_tool_rounds_match_reference(reference_diff: Any, model: str, case: str) -> None:
    body = {
        "model": model,
        "input": [{"role": "user", "content": "Q"}, *RESPONSES_ITEMS[case]],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "custom", "name": "apply_patch"}],
    }
    text = json.dumps(body)
    assert reference_diff("responses", text) is None, reference_diff("responses", text)


call_ids = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8),
    st.from_regex(r"(call|toolu|fc|chatcmpl-tool)_?[0-9A-Za-z]{1,12}", fullmatch=True),
    st.integers(0, 10**6).map(lambda n: f"call_{n}"),
)


@st.composite
def rounds(draw: st.DrawFn) -> list[tuple[list[str], list[str]]]:
    """1-3 rounds of 1-5 calls with distinct random ids; results in a random order."""
    out = []
    used: set[str] = set()
    for _ in range(draw(st.integers(1, 3))):
        ids = draw(st.lists(call_ids.filter(lambda i: i not in used), min_size=1, max_size=5, unique=True))
        used.update(ids)
        out.append((ids, draw(st.permutations(ids))))
    return out


@pytest.mark.parametrize("api", sorted(BODIES))
def test_random_call_ids_match_reference(reference_diff: Any, api: str) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(model=st.sampled_from(MODELS), body_rounds=rounds())
    def check(model: str, body_rounds: list[tuple[list[str], list[str]]]) -> None:
        text = json.dumps(BODIES[api](model, body_rounds), ensure_ascii=False)
        assert reference_diff(api, text) is None, reference_diff(api, text)

    check()


def _call(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}


def _result(i: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": i, "content": "r"}


_Q = {"role": "user", "content": "Q"}
_BAD_IMAGE = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/a.png"}}]}
_PREFIX = {"role": "assistant", "content": "x", "prefix": True}
CHAT_ID_ERRORS = {
    "repeated-id-in-one-turn": [_Q, _call("b", "a", "a", "b"), _result("a"), _result("b")],
    "repeated-id-unanswered": [_Q, _call("a", "a"), _result("a")],
    "repeated-id-before-a-later-bad-image": [_Q, _call("a", "a"), _result("a"), _result("a"), _BAD_IMAGE],
    "same-id-in-two-turns": [_Q, _call("a"), _result("a"), _call("a"), _result("a")],
    "misplaced-prefix-then-repeated-id": [_Q, _PREFIX, _call("a", "a"), _result("a"), _result("a")],
    "misplaced-prefix-then-unknown-result": [_Q, _PREFIX, _result("zz")],
    "misplaced-prefix-then-unanswered": [_Q, _PREFIX, _call("a"), _Q],
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", sorted(CHAT_ID_ERRORS))
def test_chat_call_id_errors_match_reference(reference_diff: Any, model: str, case: str) -> None:
    body = {"model": model, "messages": CHAT_ID_ERRORS[case], "tools": [{"type": "function", "function": {"name": "f"}}]}
    text = json.dumps(body)
    assert reference_diff("chat", text) is None, reference_diff("chat", text)


def _use(i: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": i, "name": "f", "input": {}}


def _answer(*ids: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids]}


MESSAGES_ID_ERRORS = {
    "repeated-tool-use-id": [_Q, {"role": "assistant", "content": [_use("a"), _use("a")]}, _answer("a")],
    "repeated-id-and-results": [_Q, {"role": "assistant", "content": [_use("a"), _use("b"), _use("a")]}, _answer("a", "b", "a")],
    "text-before-the-repeat": [_Q, {"role": "assistant", "content": [_use("a"), {"type": "text", "text": "x"}, _use("a")]}],
    "same-id-in-two-turns": [_Q, {"role": "assistant", "content": [_use("a")]}, _answer("a"), {"role": "assistant", "content": [_use("a")]}, _answer("a")],
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", sorted(MESSAGES_ID_ERRORS))
def test_messages_tool_use_id_errors_match_reference(reference_diff: Any, model: str, case: str) -> None:
    body = {"model": model, "max_tokens": 8, "messages": MESSAGES_ID_ERRORS[case], "tools": [{"name": "f", "input_schema": {"type": "object"}}]}
    text = json.dumps(body)
    assert reference_diff("messages", text) is None, reference_diff("messages", text)
