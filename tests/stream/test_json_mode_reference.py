"""JSON mode against the live reference: stop strings, fences, stray markup (issue 21, class 1).

With `response_format: json_object` the reference matches stop strings in the JSON text only (after the
fence opener or the bare start, up to and including the closing fence), never in the prose around it;
a stray `</think>` is removed before the answer only (and no fence opener spans it), and tool-call markup opens a block outside the
JSON text only. Each output is fed whole, in text chunks of 1 to 3 characters and as token ids, with
each stop string, and every event must equal the reference's.
"""

from __future__ import annotations

from typing import Any

import pytest

DSML_BLOCK = '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="calc">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'

OUTPUTS = [
    'Sure STOP here {"a": 1} ok STOP more',
    'Sure here {"a": "STOP"} ok',
    '```json\n{"a": 1}\n``` STOP more',
    '{"a": 1}\n```\nok',
    'x [1, "```"]\n```json\n{}\n```',
    '```json\n{"q": "\\"quoted\\" and｜ \\\\ back"}\n```\nDone.',
    '". 🙂\n\nsunny [1]\n\n{</k}',
    'x </think> {"a": "</think>"} </think> y',
    'x </think> ```json\n{"a": "</think>"}\n``` </think> y',
    '``` [1]", [1], }｜, 🙂\n`code`\n</thi`json\n{"q": 1}\n``',
    'x {"a": 1\n```\n} more',
    '```json\n{}\n``` a </think> b' + DSML_BLOCK,
    '{} a </think> b' + DSML_BLOCK,
    # a fence opener cannot span a stray `</think>`: the prose before and after it is blanked
    '`</think>``\n{"city": "Paris"}',
    '``</think>`json\n{"a": 1}\n```',
    # nor into a tool-call block
    'x\n``\n\n' + DSML_BLOCK,
    '``' + DSML_BLOCK,
]
STOPS = ["STOP", "}\n", "\n`", "1}\n```", "`\n", "ok", "{", '"a', " ", "json", "｜", "</", "```"]
FAST = (("stop",), [("text", None), ("text", 1), ("tokens", 1)])
FULL = (("stop", "length"), [("text", None), ("text", 1), ("text", 2), ("text", 3), ("tokens", 1), ("tokens", 3)])


def _body(stop: str | None, tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "DeepSeek-V4-Pro", "stream": True, "thinking": {"type": "disabled"},
        "messages": [{"role": "user", "content": "Weather in Paris? Answer in JSON."}],
        "response_format": {"type": "json_object"}, "stream_options": {"include_usage": True},
    }
    if stop is not None:
        body["stop"] = [stop]
    if tools:
        params = {"type": "object", "properties": {"city": {"type": "string"}}}
        body["tools"] = [{"type": "function", "function": {"name": "calc", "parameters": params}}]
    return body


def _check(output: str, grid: Any, differential: Any, tokenizer: Any, reference_tokenizer: Any) -> None:
    finishes, chunkings = grid
    failures = []
    for stop in [None, *STOPS]:
        for finish in finishes:
            case = {"api": "chat", "body": _body(stop, tools="DSML" in output), "output": output, "finish": finish,
                    "prompt_tokens": 7, "cached": 0}
            for feed, chunks in chunkings:
                case["feed"] = feed
                upds = differential.explicit_updates(case, chunks, tokenizer)
                diff = differential.compare_updates(case, upds, tokenizer, reference_tokenizer)
                if diff:
                    failures.append((stop, finish, feed, chunks, diff[:300]))
    assert not failures, failures[:3]


@pytest.mark.parametrize("output", OUTPUTS)
def test_json_mode_with_stop_strings_equals_reference(
    output: str, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    _check(output, FAST, differential, v4_tokenizer, reference_tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("output", OUTPUTS)
def test_json_mode_with_stop_strings_equals_reference_every_chunking(
    output: str, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    _check(output, FULL, differential, v4_tokenizer, reference_tokenizer)
