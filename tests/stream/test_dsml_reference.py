"""Malformed DSML tool-call markup against the live reference (issue 21, class 2).

The reference reads a parameter tag as `parameter name=`, then the key exactly as written (its quotes
included) up to the first space, then the rest of the tag, which must end in `true">` (a string value)
or `false">` (a JSON value); anything else ends the block where it stands, the call left unterminated.
Every attribute spelling below is fed whole and one character or token at a time through the three
APIs, and every event must equal the reference's.
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
