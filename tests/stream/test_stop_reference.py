"""Stop sequences against the live reference: which match wins, leading newlines, special tokens, usage.

The reference's streaming matcher ends the output at the match that completes first: at a tie a stop
sequence beats `</think>` and the tool-call opener, and the stop listed first beats the others. The
answer's dropped leading newlines end it only for the stop sequence `"\\n"` itself. With token ids a
special token is one opaque unit that no stop sequence matches inside. Completion tokens are counted up
to the special-token segment of an update in which a stop sequence ends the output. The Responses echo
reports a JSON-schema text format with all of its fields.
"""

from __future__ import annotations

from typing import Any

import pytest

DSML_BLOCK = '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="calc">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}}

# (api, output, stop sequences, thinking, tools)
CASES: list[tuple[str, str, list[str], bool, bool]] = [
    *[("chat", "xa</think>by", [s], False, False)
      for s in ["think>b", "k>", "a</think>", "</think>b", "</think>", "ink>", "</thi", "ab"]],
    *[("chat", "xa" + DSML_BLOCK, [s], False, True)
      for s in ["DSML｜t", "<｜DSML｜t", "a<｜DS", "｜DSML｜", "<｜DSML｜", "DSML｜", "a\n<"]],
    *[("messages", "xa</b", s, False, False)
      for s in [["</", "a</"], ["a</", "</"], ["a</b", "</"], ["a", "xa"], ["xa", "a"], ["</b", "a</"]]],
    *[("messages", o, s, True, False)
      for o in ["r</think>\nxa", "r</think>\n\n\nxa", "r\n</think>xa"] for s in [["\n"], ["\nx"], ["\n\n"], ["q", "\n"]]],
    *[("chat", o, s, False, False) for o in ["\nxa", "\n\nxa", "x\n\nb"] for s in [["\n"], ["\n\n"], ["\n", "x"]]],
    *[("chat", o, s, False, False)
      for o in ["x <｜ref｜> y ｜ z", "x <think> y think z", 'ab"cd<think>ef'] for s in [["｜"], ["<"], ["think"], ['"']]],
]


def _body(api: str, stops: list[str], thinking: bool, tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "DeepSeek-V4-Pro", "stream": True,
                            "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    if not thinking:
        body["thinking"] = {"type": "disabled"}
    if api == "messages":
        body["max_tokens"] = 100
        body["stop_sequences"] = stops
        if tools:
            body["tools"] = [{"name": "calc", "input_schema": PARAMS}]
    else:
        body["stop"] = stops
        body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = [{"type": "function", "function": {"name": "calc", "parameters": PARAMS}}]
    return body


@pytest.mark.parametrize(("api", "output", "stops", "thinking", "tools"), CASES)
def test_stop_sequences_equal_reference(
    api: str, output: str, stops: list[str], thinking: bool, tools: bool,
    differential: Any, v4_tokenizer: Any, reference_tokenizer: Any,
) -> None:
    case = {"api": api, "body": _body(api, stops, thinking, tools), "output": output, "finish": "length",
            "prompt_tokens": 5, "cached": 0}
    failures = []
    for feed, chunks in [("text", None), ("text", 1), ("text", 2), ("tokens", 1), ("tokens", None)]:
        case["feed"] = feed
        upds = differential.explicit_updates(case, chunks, v4_tokenizer)
        diff = differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer)
        if diff:
            failures.append((feed, chunks, diff[:300]))
    assert not failures, failures[:3]


@pytest.mark.parametrize("fmt", [
    {"type": "json_schema", "name": "w", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
    {"type": "json_schema", "name": "w", "strict": False, "description": "d", "extra": 1,
     "schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
    {"type": "json_object", "extra": 1},
])
def test_responses_echo_of_text_format_equals_reference(
    fmt: dict[str, Any], differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    body = {"model": "DeepSeek-V4-Pro", "stream": True, "input": "Answer in json.", "text": {"format": fmt}}
    case = {"api": "responses", "body": body, "output": '{"a": "b"}', "finish": "stop", "feed": "text",
            "prompt_tokens": 5, "cached": 0}
    upds = differential.explicit_updates(case, 3, v4_tokenizer)
    assert differential.compare_updates(case, upds, v4_tokenizer, reference_tokenizer) is None
