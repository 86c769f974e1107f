"""Property tests: text a client sends never becomes special-token ids, and random texts convert,
render and encode exactly as the official reference does.

The texts are drawn from pieces that spell every special marker, and each body also holds the real
structure those markers stand for: image parts beside text spelling `<｜image｜>` (V4.1), tool calls
whose ids and arguments spell DSML, tool results beside text spelling `<tool_result>`, a reminder, an
in-place system message (V4.1), reasoning in thinking mode.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.codecs import deepseek_v4, deepseek_v41

from recipe.codec import convert, encode, render
from recipe.tokenizer import load_deepseek_v4_tokenizer

SPELLINGS = sorted(
    {*deepseek_v4.SPECIAL_TOKENS, *deepseek_v41.SPECIAL_TOKENS}
    | {"<tool_result>", "</tool_result>", "<｜DSML｜tool_calls>", "<｜DSML｜ calls>", "</｜DSML｜invoke>",
       "<system-reminder>", "[Unsupported Image]", "<|im_start|>", "<|im_end|>"}
)  # fmt: skip
PIECES = [*SPELLINGS, "a", "Z", " ", "\n", "\n\n", "中文", "é", "😀", "{", "}", '"', "\\", "<", ">", "｜", "▁", "12345", "json"]
PNG = "data:image/png;base64,iVBORw0KGgo="
IMAGE = "<｜image｜>"

texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=12).map("".join),
    st.text(max_size=40),
)
# A text that surely spells some marker, somewhere in it.
marker_texts = st.builds(lambda a, m, b: a + m + b, texts, st.sampled_from(SPELLINGS), texts)
# A content: plain text, or parts where real images sit beside texts that spell markers.
image_texts = st.builds(lambda a, b: a + IMAGE + b, texts, texts)  # spells what an image part stands for
text_parts = st.one_of(texts, marker_texts, image_texts).map(lambda t: {"type": "text", "text": t})
IMAGE_PART = {"type": "image_url", "image_url": {"url": PNG}}
image_parts = st.just(IMAGE_PART)
contents = st.one_of(
    texts,
    marker_texts,
    st.tuples(st.lists(text_parts, max_size=2), st.lists(st.one_of(text_parts, image_parts), max_size=2)).map(
        lambda ab: [*ab[0], IMAGE_PART, *ab[1]]
    ),
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_deepseek_v4_tokenizer()


@st.composite
def bodies(draw: st.DrawFn, neutral: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """`(body, same body with every client text replaced by "x")` for the Chat API."""
    model = draw(st.sampled_from(["DeepSeek-V4-Pro", "DeepSeek-V4.1-Flash"]))
    thinking = draw(st.booleans())
    ids = draw(st.lists(texts, min_size=1, max_size=3, unique=True)) if draw(st.booleans()) else []
    order = draw(st.permutations(range(len(ids))))
    pieces = {
        "system": draw(texts),
        "user": draw(contents),
        "later_system": draw(texts) if model.endswith("Flash") and draw(st.booleans()) else None,
        "args": [draw(texts) for _ in ids],
        "results": [draw(contents) for _ in ids],
        "reminder": draw(texts),
        "last": draw(contents),
        "description": draw(texts),
    }

    def x(value: Any) -> Any:
        if isinstance(value, str):
            return "x" if value else ""  # an empty text can drop its message: keep it empty
        if isinstance(value, list):
            return [x(v) for v in value]
        if isinstance(value, dict):
            return {k: x(v) if k == "text" else v for k, v in value.items()}
        return value

    def build(p: dict[str, Any], call_ids: list[str]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": p["system"]}, {"role": "user", "content": p["user"]}]
        if p["later_system"] is not None:
            messages.append({"role": "system", "content": p["later_system"]})
        if call_ids:
            calls = [
                {"id": i, "type": "function", "function": {"name": "f", "arguments": json.dumps({"q": a})}}
                for i, a in zip(call_ids, p["args"], strict=True)
            ]
            messages.append({"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": calls})
            messages += [{"role": "tool", "tool_call_id": call_ids[k], "content": p["results"][k]} for k in order]
        messages.append({"role": "latest_reminder", "content": p["reminder"]})
        messages.append({"role": "user", "content": p["last"]})
        out: dict[str, Any] = {"model": model, "messages": messages, "thinking": {"type": "enabled" if thinking else "disabled"}}
        if call_ids:
            params = {"type": "object", "properties": {"q": {"type": "string", "description": p["description"]}}}
            out["tools"] = [{"type": "function", "function": {"name": "f", "description": p["description"], "parameters": params}}]
        return out

    # Neutral ids keep the real ids' sort order, so both bodies render their calls in the same order.
    ranks = {i: r for r, i in enumerate(sorted(ids))}
    return build(pieces, ids), build({k: x(v) for k, v in pieces.items()}, [f"x{ranks[i]}" for i in ids])


def special_spellings(text: str) -> list[str]:
    rendered = render(convert("chat", text))
    return [rendered.prompt[a:b] for a, b in rendered.special_ranges]


def plain_segments(prompt: str, ranges: tuple[tuple[int, int], ...]) -> list[str]:
    """The prompt's plain text between its special ranges."""
    cuts = [0, *(p for r in ranges for p in r), len(prompt)]
    return [prompt[cuts[k] : cuts[k + 1]] for k in range(0, len(cuts), 2)]


def rendered_texts(body: dict[str, Any]) -> list[str]:
    """The client texts that a prompt shows verbatim (message contents and text parts)."""
    out = []
    for m in body["messages"]:
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        out += [p["text"] for p in parts if p.get("type") == "text" and p.get("text")]
    return out


@SETTINGS
@given(pair=bodies())
def test_client_text_never_becomes_special(tokenizer: Any, pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    body, neutral = pair
    text = json.dumps(body, ensure_ascii=False)
    # the special spans are exactly the template's, whatever the texts spell
    assert special_spellings(text) == special_spellings(json.dumps(neutral))
    req = convert("chat", text)
    rendered = render(req)
    # and no special range falls inside a client text: each text lies whole in one plain segment
    segments = plain_segments(rendered.prompt, rendered.special_ranges)
    for t in rendered_texts(body):
        assert any(t in seg for seg in segments), t
    if req.model_version.value == "DeepseekV4Pro":
        ids = encode(req, tokenizer)
        assert sum(1 for i in ids if i in tokenizer.special_ids) == len(rendered.special_ranges)
        assert tokenizer.decode(ids) == rendered.prompt


@SETTINGS
@given(pair=bodies(), assistant=texts, reasoning=texts)
def test_random_texts_match_the_reference(reference_diff: Any, pair: tuple[dict[str, Any], dict[str, Any]], assistant: str, reasoning: str) -> None:
    body, _ = pair
    # Assistant history text may spell grounding markers, which both render as special by design.
    body["messages"].insert(2, {"role": "assistant", "content": assistant, "reasoning_content": reasoning})
    body["messages"].insert(3, {"role": "user", "content": "next"})
    text = json.dumps(body, ensure_ascii=False)
    assert reference_diff("chat", text) is None, reference_diff("chat", text)
