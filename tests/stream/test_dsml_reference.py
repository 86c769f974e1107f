"""Malformed DSML tool-call markup against the live reference (issue 21, class 2).

The reference reads a parameter tag as `parameter name=`, then the key exactly as written (its quotes
included) up to the first space, then skips to the next `true">` (a string value) or `false">` (a JSON
value), wherever that is; stray text between tags is dropped, `invoke name="` starts a call even
outside a tag, any closing DSML tag ends a value or an invoke, and tags of either model version count.
Argument text is grouped by the backend chunk it arrived in. Every shape below is fed whole, one
character or token at a time, and in chosen chunks, through the three APIs; every event must equal
the reference's.
"""

from __future__ import annotations

from typing import Any

import pytest

BLOCK = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="calc">\n<｜DSML｜parameter {}>v</｜DSML｜parameter>\n'
         '</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
ATTRIBUTES = [
    'name="k" string="true"', 'name=k string="true"', 'name="k" string="false"', 'name="k"  string="true"',
    'name="k" strin="true"', 'name="k" x="1" string="true"', 'name="k" string="true" x="1"', 'name="k" true"',
    'name="k" false"', 'name="k"', 'name="k" ', 'name="k" string="TRUE"', 'name="k" string="maybe"',
    'nam="k" string="true"', ' name="k" string="true"', 'name="k"y" string="true"', 'name="a b" string="true"',
]
# malformed blocks whose recovery differs from a well-formed reading
RECOVERY = [
    # a malformed attribute: skipped up to the next parameter's `false">`
    '<｜DSML｜tool_calls><｜DSML｜invoke name="calc"><｜DSML｜parameter name="k"ey0" string="true" x="1">abc'
    '</｜DSML｜parameter><｜DSML｜parameter name="d" string="false">null</｜DSML｜parameter></｜DSML｜invoke>'
    '</｜DSML｜tool_calls>',
    # stray text: `invoke name="` and `parameter name=` outside tags, a foreign closing tag ends the value
    '<｜DSML｜tool_calls>junk invoke name="calc">zz parameter name="a" string="true">v</｜DSML｜x>',
    # tags of both versions in one block, the V4.1 closing tag closes a V4 block, text after it is dropped
    '<｜DSML｜tool_calls>\n<｜DSML｜ invoke name="calc">\n<｜DSML｜parameter name="city" string="true">a</｜DSML｜ '
    'parameter>\n</｜DSML｜invoke>\n</｜DSML｜ calls>tail',
    # a special token inside markup, a cut tag name, a value cut at the end of output
    '<｜DSML｜ calls><｜<｜Assistant｜>DSML｜ invoke name="calc">\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name="ca'
    'lc"><｜DSML｜ parameter name="q" string="true">x</｜DS',
    # an unknown tag inside an invoke ends it; the parameters after it are dropped
    '<｜DSML｜tool_calls><｜DSML｜invoke name="calc"><｜DSML｜foo>stray</｜DSML｜foo><｜DSML｜parameter name="a" '
    'string="true">v</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>',
]
VALUE = '<｜DSML｜tool_calls><｜DSML｜invoke name="calc"><｜DSML｜parameter name="k" string="{}">'
# (value type, chunks after the parameter tag): text that may begin a closing tag, held across chunks
CHUNKED = [
    ("true", ["ab<", "x", "y</｜DSML｜parameter>"]),
    ("true", ["ab<", "<", "/x", "y</｜DSML｜parameter>"]),
    ("true", ["ab", "<", "/", "x</｜DSML｜parameter></｜DSML｜invoke>"]),
    ("false", ["hello", " wor<", "ld</｜D", "SML｜parameter><｜DSML｜parameter na", 'me="b" string="false">1<', "/x"]),
    ("false", ['"</x"', "</｜DSML｜parameter>"]),
    ("true", ["a<", "b</｜DSML｜parameter></", "｜DSML｜invoke>"]),
]
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}}


def _body(api: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "DeepSeek-V4-Pro", "stream": True}
    if api == "responses":
        return {**body, "input": "Weather?", "reasoning": {"effort": "none"},
                "tools": [{"type": "function", "name": "calc", "parameters": PARAMS}]}
    body.update(messages=[{"role": "user", "content": "Weather?"}], thinking={"type": "disabled"})
    if api == "messages":
        return {**body, "max_tokens": 100, "tools": [{"name": "calc", "input_schema": PARAMS}]}
    return {**body, "tools": [{"type": "function", "function": {"name": "calc", "parameters": PARAMS}}]}


@pytest.mark.parametrize("attributes", ATTRIBUTES)
def test_parameter_tag_spellings_equal_reference(
    attributes: str, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    failures = []
    for api in ("chat", "messages", "responses"):
        case = {"api": api, "body": _body(api), "output": BLOCK.format(attributes), "finish": "stop",
                "prompt_tokens": 5, "cached": 0}
        for feed, chunks in [("text", None), ("text", 1), ("tokens", 1), ("tokens", None)]:
            case["feed"] = feed
            upds = differential.explicit_updates(case, chunks, v4_tokenizer)
            diff = differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer)
            if diff:
                failures.append((api, feed, chunks, diff[:300]))
    assert not failures, failures[:3]


@pytest.mark.parametrize("output", RECOVERY)
def test_malformed_blocks_recover_as_reference(
    output: str, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    failures = []
    for api in ("chat", "messages", "responses"):
        case = {"api": api, "body": _body(api), "output": output, "finish": "stop", "prompt_tokens": 5, "cached": 0}
        for feed, chunks in [("text", None), ("text", 1), ("text", 3), ("tokens", 1), ("tokens", 2), ("tokens", None)]:
            case["feed"] = feed
            upds = differential.explicit_updates(case, chunks, v4_tokenizer)
            diff = differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer)
            if diff:
                failures.append((api, feed, chunks, diff[:300]))
    assert not failures, failures[:3]


@pytest.mark.parametrize(("kind", "chunks"), CHUNKED)
def test_argument_deltas_grouped_by_chunk_as_reference(
    kind: str, chunks: list[str], differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    head = VALUE.format(kind)
    failures = []
    for api in ("chat", "messages", "responses"):
        case = {"api": api, "body": _body(api), "output": head + "".join(chunks), "finish": "stop",
                "prompt_tokens": 5, "cached": 0, "feed": "text"}
        upds = differential.explicit_updates(case, [head, *chunks], v4_tokenizer)
        diff = differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer)
        if diff:
            failures.append((api, diff[:300]))
    assert not failures, failures[:3]


@pytest.mark.parametrize("lead", ["Sure. ", "I will call it:\n", "<b>"])
def test_named_tool_choice_output_opening_with_free_text(
    lead: str, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    """The prompt opened the block; free text before the first invoke is dropped, as the reference does."""
    output = lead + '<｜DSML｜invoke name="calc">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>' \
        '\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
    choice = {"chat": {"type": "function", "function": {"name": "calc"}}, "messages": {"type": "tool", "name": "calc"},
              "responses": {"type": "function", "name": "calc"}}
    failures = []
    for api in ("chat", "messages", "responses"):
        case = {"api": api, "body": {**_body(api), "tool_choice": choice[api]}, "output": output, "finish": "stop",
                "prompt_tokens": 5, "cached": 0}
        for feed, chunks in [("text", None), ("text", 2), ("tokens", 1)]:
            case["feed"] = feed
            upds = differential.explicit_updates(case, chunks, v4_tokenizer)
            diff = differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer)
            if diff:
                failures.append((api, feed, chunks, diff[:300]))
    assert not failures, failures[:3]
