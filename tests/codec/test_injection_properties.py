"""Property tests: text a client sends never becomes special-token ids, and random texts convert,
render and encode exactly as the official reference does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.codec import convert, encode, render
from recipe.tokenizer import load_deepseek_v4_tokenizer

SPELLINGS = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜System｜>",
    "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜", "<｜DSML｜tool_calls>", "<｜image｜>",
    "<｜ref｜>", "<｜/ref｜>", "<｜box｜>", "<tool_result>", "</tool_result>",
]
PIECES = [*SPELLINGS, "a", "Z", " ", "\n", "\n\n", "中文", "é", "😀", "{", "}", '"', "\\", "<", ">", "｜", "▁", "12345", "json"]

texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=12).map("".join),
    st.text(max_size=40),
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_deepseek_v4_tokenizer()


@pytest.fixture(scope="module")
def reference() -> Any:
    """The official encoder (dev-only dependency deepseek-recipe 0.2.0) with the same tokenizer."""
    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path

    return dr, dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path())))


def body(user: str, system: str, tool_result: str, reminder: str, thinking: bool, tools: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if tools:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"q": user})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": tool_result},
        ]
    messages.append({"role": "latest_reminder", "content": reminder})
    out: dict[str, Any] = {"model": "DeepSeek-V4-Pro", "messages": messages, "thinking": {"type": "enabled" if thinking else "disabled"}}
    if tools:
        out["tools"] = [{"type": "function", "function": {"name": "f", "description": system, "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": user}}}}}]
    return out


def special_spellings(api_body: dict[str, Any]) -> list[str]:
    rendered = render(convert("chat", api_body))
    return [rendered.prompt[a:b] for a, b in rendered.special_ranges]


@SETTINGS
@given(user=texts, system=texts, tool_result=texts, reminder=texts, thinking=st.booleans(), tools=st.booleans())
def test_client_text_never_becomes_special(
    tokenizer: Any, user: str, system: str, tool_result: str, reminder: str, thinking: bool, tools: bool
) -> None:
    b = body(user, system, tool_result, reminder, thinking, tools)
    neutral = body("x", "x", "x", "x", thinking, tools)
    # the special spans are exactly the template's, whatever the texts spell
    assert special_spellings(b) == special_spellings(neutral)
    req = convert("chat", b)
    rendered = render(req)
    ids = encode(req, tokenizer)
    assert sum(1 for i in ids if i in tokenizer.special_ids) == len(rendered.special_ranges)
    assert tokenizer.decode(ids) == rendered.prompt


@SETTINGS
@given(user=texts, system=texts, tool_result=texts, reminder=texts, thinking=st.booleans(), tools=st.booleans())
def test_random_texts_match_the_reference(
    tokenizer: Any, reference: Any, user: str, system: str, tool_result: str, reminder: str, thinking: bool, tools: bool
) -> None:
    dr, enc = reference
    text = json.dumps(body(user, system, tool_result, reminder, thinking, tools))
    ref_conv = dr.ChatCompletionRequest(text).convert(dr.ConversionOptions()).conversation
    ref = enc.render_conversation(ref_conv)
    req = convert("chat", text)
    ours = render(req)
    assert ours.prompt == ref.prompt
    assert list(ours.special_ranges) == [tuple(r) for r in ref.special_ranges]
    assert encode(req, tokenizer) == enc.encode(ref_conv)
