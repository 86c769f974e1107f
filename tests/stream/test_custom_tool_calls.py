"""Calls of Responses custom tools come back as `custom_tool_call` items, event for event as the official
reference reports them (the live oracle `deepseek-recipe`): `ctc_` ids, `response.custom_tool_call_input.delta`
/ `.done`, and `input` = the raw text (the `input` argument when it is a string, else the whole arguments).

Drawn: the model version, raw or JSON-string `input` values (patches with quotes, backslashes, unicode,
markup-like text), other parameter shapes, a function tool beside the custom one, text before the calls,
text or token feeds split at random, and the finish reason (a call cut off by `length` included).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])
VALUE_CHARS = st.characters(blacklist_characters="｜<", blacklist_categories=["Cs"])
values = st.one_of(
    st.text(VALUE_CHARS, max_size=30),
    st.sampled_from(["*** Begin Patch\n*** Add File: a.txt\n+hi \"q\" \\ é 🙂\n*** End Patch\n", "", "{}", "[1]",
                     '"quoted"', "tab\there\nnew", "\\u00e9"]),
)


@st.composite
def params(draw: Any, v41: bool) -> str:
    sp = " " if v41 else ""
    shape = draw(st.sampled_from(["raw", "json_string", "json_other", "other_name", "two", "none"]))
    value = draw(values)

    def param(name: str, text: str, string: bool) -> str:
        flag = "true" if string else "false"
        return f'<｜DSML｜{sp}parameter name="{name}" string="{flag}">{text}</｜DSML｜{sp}parameter>\n'

    if shape == "raw":
        return param("input", value, True)
    if shape == "json_string":
        return param("input", json.dumps(value, ensure_ascii=draw(st.booleans())), False)
    if shape == "json_other":
        return param("input", json.dumps(draw(st.sampled_from([1, [1, "a"], {"k": value}, None, True]))), False)
    if shape == "other_name":
        return param("path", value, True)
    if shape == "two":
        return param("input", value, True) + param("extra", "x", True)
    return ""


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    v41 = draw(st.booleans())
    sp, block = (" ", "calls") if v41 else ("", "tool_calls")
    tools: list[dict[str, Any]] = [{"type": "custom", "name": "apply_patch"}]
    if draw(st.booleans()):
        tools.append({"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}})
    invokes = ""
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from([t["name"] for t in tools]))
        invokes += f'<｜DSML｜{sp}invoke name="{name}">\n{draw(params(v41))}</｜DSML｜{sp}invoke>\n'
    text = draw(st.sampled_from(["", "I will edit the file.", "ok"]))
    output = (f"{text}\n\n" if text else "") + f"<｜DSML｜{sp}{block}>\n{invokes}</｜DSML｜{sp}{block}>"
    finish = draw(st.sampled_from(["stop", "stop", "length"]))
    if finish == "length":
        output = output[: draw(st.integers(len(output) // 2, len(output)))]
    else:
        output += "<｜end▁of▁sentence｜>"
    body = {"model": "DeepSeek-V4.1-Flash" if v41 else "DeepSeek-V4-Pro", "input": "edit a.txt",
            "reasoning": {"effort": "none"}, "tools": tools}
    return {"api": "responses", "body": body, "output": output, "feed": draw(st.sampled_from(["text", "tokens"])),
            "finish": finish, "prompt_tokens": 7, "cached": 0, "chunks": draw(st.integers(1, 12))}


@SETTINGS
@given(case=cases())
def test_custom_tool_calls_equal_the_reference(case: dict[str, Any], differential: Any, v4_tokenizer: Any,
                                              reference_tokenizer: Any) -> None:
    upds = differential.explicit_updates(case, case["chunks"], v4_tokenizer)
    assert differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer) is None


def test_a_custom_call_is_a_custom_tool_call_item(differential: Any, v4_tokenizer: Any) -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    output = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="apply_patch">\n<｜DSML｜parameter name="input" '
              f'string="true">{patch}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>')
    case = {"api": "responses", "output": output, "feed": "text", "finish": "stop", "prompt_tokens": 3, "cached": 0,
            "body": {"model": "DeepSeek-V4-Pro", "input": "x", "reasoning": {"effort": "none"},
                     "tools": [{"type": "custom", "name": "apply_patch"}]}}
    ours = differential.run_ours(case, differential.explicit_updates(case, 5, v4_tokenizer), v4_tokenizer)
    (item,) = ours["response"]["output"]
    assert item["type"] == "custom_tool_call" and item["id"].startswith("ctc_") and item["input"] == patch
    deltas = [e["data"]["delta"] for e in ours["events"] if e["event"] == "response.custom_tool_call_input.delta"]
    assert len(deltas) > 1 and "".join(deltas) == patch
    (done,) = [e["data"] for e in ours["events"] if e["event"] == "response.custom_tool_call_input.done"]
    assert done["input"] == patch


@given(args=st.sampled_from(['{"input": "a\\ud83d\\nb"}', '{"input": "a\\udc00b"}', '{"input": "a\\ud83d"}',
                             '{"input": "\\uZZZZ!"}', '{"input": "\\ud83d\\ude00 ok"}', '{"input": "cut \\u00',
                             '{"input": 3}', '{"extra": "x", "input": "P"}', '{"inp']),
       cuts=st.lists(st.integers(0, 40), max_size=6))
def test_custom_input_pieces_add_up_to_the_input(args: str, cuts: list[int]) -> None:
    """Lone surrogates and malformed escapes stay as written (they have no UTF-8 spelling to stream)."""
    from recipe.stream.custom_input import CustomInput

    reader = CustomInput()
    bounds = sorted({0, len(args), *(c for c in cuts if c < len(args))})
    pieces = [reader.feed(args[a:b]) for a, b in itertools.pairwise(bounds)] + [reader.finish()]
    value = reader.value()
    assert "".join(pieces) == value
    value.encode("utf-8")  # always sendable
    expected = {'{"input": "a\\ud83d\\nb"}': "a\\ud83d\nb", '{"input": "\\ud83d\\ude00 ok"}': "😀 ok",
                '{"input": 3}': '{"input": 3}', '{"extra": "x", "input": "P"}': '{"extra": "x", "input": "P"}',
                '{"input": "cut \\u00': "cut \\u00", '{"inp': '{"inp'}
    if args in expected:
        assert value == expected[args]
