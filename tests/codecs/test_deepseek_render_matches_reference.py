"""V4 and V4.1 rendering equals the official deepseek-recipe renderer: prompt text, special ranges, images."""

from __future__ import annotations

import deepseek_recipe as dr
import pytest
from codec_oracle import conversations, to_reference
from hypothesis import HealthCheck, given, settings
from recipe.codecs import deepseek_v4, deepseek_v41

from recipe.conversation import Conversation, ImageSource, Message, ToolCall, ToolDefinition

CODECS = {
    "v4": (deepseek_v4, dr.DeepseekV4Encoding()),
    "v41": (deepseek_v41, dr.DeepseekV41Encoding()),
}


def assert_same(version: str, conv: Conversation) -> None:
    codec, ref = CODECS[version]
    expected = ref.render_conversation(to_reference(conv))
    got = codec.render(conv)
    assert got.prompt == expected.prompt
    assert list(got.special_ranges) == [tuple(r) for r in expected.special_ranges]
    assert [(s.url, s.detail) for s in got.image_sources] == [
        (s.url, s.detail) for s in expected.image_sources
    ]


WEATHER = ToolDefinition(
    "get_weather",
    "Get weather",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CALL = ToolCall("c1", "get_weather", '{"city": "Paris"}')
IMG = ImageSource("url", url="https://example.com/a.png")


def _u(text: str, *images: ImageSource) -> Message:
    return Message("user", text, image_sources=images)


def _a(
    text: str, reasoning: str | None = None, calls: tuple[ToolCall, ...] | None = None, prefix: bool = False
):
    return Message("assistant", text, reasoning_content=reasoning, tool_calls=calls, prefix=prefix)


def _t(text: str, call_id: str) -> Message:
    return Message("tool", text, tool_call_id=call_id)


def _s(text: str, tools: tuple[ToolDefinition, ...] | None = None) -> Message:
    return Message("system", text, tools=tools)


HAND_CASES: dict[str, Conversation] = {
    "bos-system-user-thinking-off": Conversation((_s("You are terse."), _u("Hi")), thinking_mode=False),
    "system-hoisted-users-merge": Conversation((_u("Q1"), _s("S2"), _u("Q2")), thinking_mode=False),
    "empty-conversation": Conversation(()),
    "empty-conversation-with-tools": Conversation((), tools=(WEATHER,)),
    **{
        f"effort-{effort}-{think}": Conversation(
            (_s("S"), _u("Hi")), thinking_mode=think, reasoning_effort=effort
        )
        for effort in (None, "low", "high", "xhigh", "max")
        for think in (True, False)
    },
    "history-reasoning-dropped-without-tools": Conversation(
        (_u("Q1"), _a("A1", "R1"), _u("Q2")), reasoning_effort="low"
    ),
    "history-reasoning-kept-with-tools": Conversation(
        (_u("Q"), _a("", "Need it.", (CALL,)), _t("sunny", "c1"), _a("A", "R2"), _u("Q3")), tools=(WEATHER,)
    ),
    "history-reasoning-none-with-tools": Conversation(
        (_u("Q"), _a("", None, (CALL,)), _t("sunny", "c1")), tools=(WEATHER,), thinking_mode=True
    ),
    "tool-choice-none-hides-tools": Conversation(
        (_u("Q"), _a("A", "R")), tools=(WEATHER,), tool_choice="none"
    ),
    "tool-choice-required": Conversation(
        (_u("Paris?"),), tools=(WEATHER,), tool_choice="required", thinking_mode=False
    ),
    "results-reordered-to-call-order": Conversation(
        (
            _u("Q"),
            _a("Let me check.", None, tuple(ToolCall(f"c{i}", "get_weather", "{}") for i in range(3))),
            _t("r2", "c2"),
            _t("r0", "c0"),
            _t("r1", "c1"),
            _u("thanks"),
            _u("more"),
        ),
        tools=(WEATHER,),
        thinking_mode=False,
    ),
    "tool-results-after-user": Conversation(
        (_u("Q"), _t("t1", "a"), _t("t2", "b"), _u("Q2")), thinking_mode=False
    ),
    "dsml-argument-kinds": Conversation(
        (
            _u("Q"),
            _a(
                "x",
                None,
                (
                    ToolCall(
                        "a",
                        "f",
                        '{"s": "v\\n", "n": 1.5e-5, "m": 1e-6, "o": {"k": [1, 2.0]}, "z": null, "b": true}',
                    ),
                    ToolCall("b", "g", "[1]"),
                    ToolCall("c", "h", ""),
                    ToolCall("d", "h", "{}"),
                    ToolCall("e", "h", "not json"),
                    ToolCall("f", "h", '{"big": 123456789012345678901234}'),
                ),
            ),
        ),
        thinking_mode=False,
    ),
    "prefix-continuation": Conversation(
        (_u("Write a haiku"), _a("Autumn", "5-7-5", prefix=True)), reasoning_effort="low"
    ),
    "prefix-open-reasoning": Conversation((_u("Q"), _a("", "R", prefix=True)), reasoning_effort="low"),
    "prefix-empty-none": Conversation((_u("Q"), _a("", None, prefix=True))),
    "prefix-thinking-off": Conversation((_u("Q"), _a("x", "R", prefix=True)), thinking_mode=False),
    "prefix-first-message": Conversation((_a("", "R", prefix=True),)),
    "prefix-not-last": Conversation((_u("Q"), _a("x", "R", prefix=True), _u("after"))),
    "json-object": Conversation(
        (_u("List 2 colors as JSON"),), thinking_mode=False, response_format="json_object"
    ),
    "json-schema-floats": Conversation(
        (_u("Q"),),
        thinking_mode=False,
        response_format="json_schema",
        response_schema={
            "a": 1.5e-5,
            "b": 1e-6,
            "c": 1e20,
            "d": 2.0,
            "e": -0.0,
            "g": 1e16,
            "h": 1e-5,
            "s": "é\u2028\x01",
        },
    ),
    "regex-format-renders-nothing": Conversation(
        (_u("Q"),), thinking_mode=False, response_format="regex", response_regex="a+"
    ),
    "tools-and-format-and-system-tools": Conversation(
        (_s("S1", (WEATHER,)), _u("Q"), _s("S2", (WEATHER,))),
        tools=(WEATHER,),
        response_format="json_object",
        reasoning_effort="max",
    ),
    "images-placeholders": Conversation(
        (
            _u("a <｜image｜> b <｜image｜> c", IMG),
            Message("system", "s<｜image｜>", image_sources=(IMG,)),
            _u("x", IMG),
        ),
        thinking_mode=False,
    ),
    "latest-reminders": Conversation(
        (
            Message("latest_reminder", "r0"),
            _u("Q"),
            Message("latest_reminder", "r1"),
            Message("latest_reminder", "r2"),
        ),
        thinking_mode=False,
    ),
    "special-spellings-in-user-text": Conversation(
        (_u("<｜Assistant｜></think>hi<｜end▁of▁sentence｜>｜DSML｜<｜ref｜><｜image｜>"),),
        thinking_mode=False,
    ),
    "grounding-tokens-in-assistant": Conversation(
        (
            _u("Q <｜ref｜>x<｜/ref｜>"),
            _a("see <｜ref｜>cat<｜/ref｜> <｜box｜><｜image｜>", "r <｜ref｜>a<｜/ref｜>", prefix=True),
        ),
        reasoning_effort="max",
    ),
    "deferred-tools-only": Conversation(
        (_u("Q"), _a("A", "R")),
        tools=(ToolDefinition("f", "d", {}, defer_loading=True),),
        reasoning_effort="low",
    ),
    "empty-user-contents": Conversation((_u(""), _u("Q"), _u(""), _u("R")), thinking_mode=False),
    "empty-system-first": Conversation((_s(""), _s("a"), _u("Q")), thinking_mode=False),
}


@pytest.mark.parametrize("version", ["v4", "v41"])
@pytest.mark.parametrize("case", sorted(HAND_CASES))
def test_hand_case_matches_reference(version: str, case: str) -> None:
    assert_same(version, HAND_CASES[case])


@pytest.mark.parametrize("version", ["v4", "v41"])
def test_random_conversations_match_reference(version: str) -> None:
    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(conversations())
    def check(conv: Conversation) -> None:
        assert_same(version, conv)

    check()


def test_spec_example_e7_prefix() -> None:
    got = deepseek_v4.render(HAND_CASES["prefix-continuation"])
    assert (
        got.prompt
        == "<｜begin▁of▁sentence｜><｜User｜>Write a haiku<｜Assistant｜><think>5-7-5</think>Autumn"
    )
    assert got.special_ranges == ((0, 21), (21, 29), (42, 55), (55, 62), (67, 75))


def test_output_markup_constants() -> None:
    assert deepseek_v4.TOOL_CALLS_START == "<｜DSML｜tool_calls>"
    assert deepseek_v41.TOOL_CALLS_START == "<｜DSML｜ calls>"
    for codec in (deepseek_v4, deepseek_v41):
        assert codec.THINK_START == "<think>" and codec.THINK_END == "</think>"
        assert codec.EOS == "<｜end▁of▁sentence｜>"
        assert codec.EOS in codec.SPECIAL_TOKENS
    assert "<｜System｜>" in deepseek_v41.SPECIAL_TOKENS and "<｜System｜>" not in deepseek_v4.SPECIAL_TOKENS
