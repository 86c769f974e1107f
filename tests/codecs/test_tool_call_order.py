"""Tool-call order in rendered history equals the official renderer's (deepseek-recipe 0.2.0).

V4 lists one assistant turn's calls sorted by call id (compared as strings, i.e. by code point) and
the results that answer them in that same order; V4.1 keeps the calls in the message's order and puts
the results in call order.
"""

from __future__ import annotations

import re

import deepseek_recipe as dr
import pytest
from codec_oracle import to_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.codecs import deepseek_v4, deepseek_v41

from recipe.conversation import Conversation, Message, ToolCall, ToolDefinition

CODECS = {"v4": (deepseek_v4, dr.DeepseekV4Encoding()), "v41": (deepseek_v41, dr.DeepseekV41Encoding())}
TOOL = ToolDefinition("f", "d", {"type": "object"})


def assert_same(version: str, conv: Conversation) -> None:
    codec, ref = CODECS[version]
    expected = ref.render_conversation(to_reference(conv))
    got = codec.render(conv)
    assert got.prompt == expected.prompt
    assert list(got.special_ranges) == [tuple(r) for r in expected.special_ranges]


def turn(ids: list[str], result_order: list[str], tail: tuple[Message, ...] = ()) -> Conversation:
    """A user question, one assistant turn calling `ids`, the results in `result_order`, then `tail`."""
    calls = tuple(ToolCall(i, f"fn_{k}", f'{{"k": {k}}}') for k, i in enumerate(ids))
    results = tuple(Message("tool", f"result of {i}", tool_call_id=i) for i in result_order)
    return Conversation(
        (Message("user", "Q"), Message("assistant", "", reasoning_content="R", tool_calls=calls), *results, *tail),
        tools=(TOOL,),
    )


def invoked(prompt: str) -> list[str]:
    return re.findall(r'invoke name="(fn_\d+)"', prompt)


def answered(prompt: str) -> list[str]:
    return re.findall(r"<tool_result>result of (.*?)</tool_result>", prompt)


def test_v4_sorts_calls_by_id_and_results_follow() -> None:
    conv = turn(["call_b", "call_a"], ["call_b", "call_a"])
    v4 = deepseek_v4.render(conv).prompt
    assert invoked(v4) == ["fn_1", "fn_0"]
    assert answered(v4) == ["call_a", "call_b"]
    v41 = deepseek_v41.render(conv).prompt
    assert invoked(v41) == ["fn_0", "fn_1"]
    assert answered(v41) == ["call_b", "call_a"]


HAND = {
    "two-out-of-order": (["call_b", "call_a"], ["call_b", "call_a"]),
    "numbers-as-strings": (["call_9", "call_10", "call_1"], ["call_10", "call_1", "call_9"]),
    "mixed-styles": (
        ["toolu_01A", "call_xyz", "fc_9", "Z", "0", "call_XYZ", "é", "😀", "\uffff"],
        ["😀", "0", "call_xyz", "\uffff", "toolu_01A", "Z", "fc_9", "é", "call_XYZ"],
    ),
    "results-in-a-third-order": (["c", "a", "b"], ["b", "c", "a"]),
    "already-sorted": (["a", "b", "c"], ["c", "b", "a"]),
    "prefix-ids": (["ab", "a", "abc", "a b"], ["a b", "abc", "a", "ab"]),
    "case": (["b", "B", "a", "A"], ["a", "A", "b", "B"]),
}


@pytest.mark.parametrize("version", ["v4", "v41"])
@pytest.mark.parametrize("case", sorted(HAND))
def test_hand_orders_match_reference(version: str, case: str) -> None:
    ids, results = HAND[case]
    assert_same(version, turn(ids, results))


@pytest.mark.parametrize("version", ["v4", "v41"])
def test_several_turns_each_sorted_on_its_own(version: str) -> None:
    second = turn(["y", "x"], ["x", "y"]).messages[1:]
    assert_same(version, turn(["b", "a", "c"], ["c", "a", "b"], (*second, Message("user", "next"))))


@pytest.mark.parametrize("version", ["v4", "v41"])
def test_duplicate_ids_keep_their_relative_order(version: str) -> None:
    assert_same(version, turn(["b", "a", "b", "a"], ["a", "b", "a", "b"]))


def test_v41_results_without_a_call_sort_with_the_first_call() -> None:
    # Direct construction only (request conversion rejects such results): the reference's V4.1 key
    # for a result that answers no call is the first call's position.
    for results in (["x", "b", "a"], ["b", "a", "x"], ["a", "x", "b"]):
        assert_same("v41", turn(["b", "a"], results))


call_ids = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=6
) | st.from_regex(r"(call|toolu|fc)_[0-9A-Za-z]{1,8}", fullmatch=True)


@st.composite
def tool_rounds(draw: st.DrawFn) -> Conversation:
    msgs: list[Message] = [Message("user", "Q")]
    for r in range(draw(st.integers(1, 3))):
        ids = draw(st.lists(call_ids, min_size=1, max_size=5, unique=True))
        calls = tuple(ToolCall(i, f"fn_{r}_{k}", "{}") for k, i in enumerate(ids))
        msgs.append(Message("assistant", draw(st.sampled_from(["", "ok"])), reasoning_content="", tool_calls=calls))
        for i in draw(st.permutations(ids)):
            msgs.append(Message("tool", f"r{i}", tool_call_id=i))
        if draw(st.booleans()):
            msgs.append(Message("user", "more"))
    return Conversation(tuple(msgs), tools=(TOOL,), thinking_mode=draw(st.booleans()))


@pytest.mark.parametrize("version", ["v4", "v41"])
def test_random_call_ids_match_reference(version: str) -> None:
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(tool_rounds())
    def check(conv: Conversation) -> None:
        assert_same(version, conv)

    check()
