"""Segment-parallel encoding returns exactly the ids of one-pass encoding (`tokenizers` on the whole text)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from long_text_material import FRAGMENTS, adversarial_texts, mixed_text

from recipe.segments import DEFAULT_SEGMENT_CHARS, DEFAULT_THRESHOLD_CHARS
from recipe.tokenizer import Tokenizer

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "requests.jsonl.gz"


@settings(max_examples=300, deadline=None)
@given(adversarial_texts, st.integers(min_value=1, max_value=40))
def test_deepseek_tiny_segments_equal_one_pass(deepseek: Tokenizer, text: str, segment_chars: int) -> None:
    expected = deepseek.plain.encode(text, add_special_tokens=False).ids
    assert deepseek.segments.encode(text, segment_chars=segment_chars, threshold_chars=0) == expected


@settings(max_examples=200, deadline=None)
@given(adversarial_texts, st.integers(min_value=1, max_value=40))
def test_demo_tokenizer_tiny_segments_equal_one_pass(smollm: Tokenizer, text: str, segment_chars: int) -> None:
    expected = smollm.plain.encode(text, add_special_tokens=False).ids
    assert smollm.segments.encode(text, segment_chars=segment_chars, threshold_chars=0) == expected


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=12),
    st.integers(min_value=20, max_value=400),
    st.integers(min_value=1, max_value=64),
)
def test_repeated_runs_equal_one_pass(deepseek: Tokenizer, fragments: list[str], repeat: int, segment_chars: int) -> None:
    """Long runs of one kind (digits, CJK, whitespace, one word) where safe cuts are rare or absent."""
    text = "".join(f * repeat for f in fragments)
    expected = deepseek.encode_plain_one_pass(text)
    assert deepseek.segments.encode(text, segment_chars=segment_chars, threshold_chars=0) == expected


def test_long_mixed_text_takes_the_parallel_path(deepseek: Tokenizer, smollm: Tokenizer) -> None:
    text = mixed_text(300_000, seed=3)
    for tok in (deepseek, smollm):
        bounds = tok.segments.bounds(text)
        assert len(bounds) > len(text) // (2 * DEFAULT_SEGMENT_CHARS)  # really segmented by default
        assert tok.encode_plain(text) == tok.encode_plain_one_pass(text)
        assert tok.segments.encode(text, segment_chars=257) == tok.encode_plain_one_pass(text)


def test_short_text_is_one_pass(deepseek: Tokenizer) -> None:
    text = mixed_text(DEFAULT_THRESHOLD_CHARS - 1, seed=4)
    assert deepseek.segments.bounds(text) == [0, len(text)]
    assert deepseek.encode_plain(text) == deepseek.encode_plain_one_pass(text)
    assert deepseek.encode_plain("") == []


def test_batch_mixes_short_and_long_texts(deepseek: Tokenizer) -> None:
    texts = [mixed_text(n, seed=n) for n in (0, 5, 1_000, 40_000, 70_001)] + ["你" * 30_000, "9" * 30_001]
    got = deepseek.encode_plain_batch(texts)
    assert got == [deepseek.encode_plain_one_pass(t) for t in texts]


def test_golden_prompts_with_tiny_segments(deepseek: Tokenizer) -> None:
    """The reference's own token ids for every V4 golden prompt (up to ~20 K chars), plain spans cut every ~97 chars."""
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    cases = [r for r in rows if r.get("token_ids")]
    assert len(cases) > 100
    for row in cases:
        prompt, ids = row["prompt"], []
        at = 0
        for start, end in [*row["special_ranges"], (len(prompt), len(prompt))]:
            ids += deepseek.segments.encode(prompt[at:start], segment_chars=97, threshold_chars=0)
            if start < end:
                ids.append(deepseek.special_id(prompt[start:end]))
            at = end
        assert ids == row["token_ids"], row["case_id"]


def test_bad_input_gets_a_clear_error(deepseek: Tokenizer) -> None:
    long_text = mixed_text(40_000, seed=5)
    cases = [("a\ud800b", "U+D800 at character 1"), (long_text + "\udfff" + long_text, "U+DFFF at character 40000")]
    for text, where in cases:
        with pytest.raises(ValueError, match=rf"not valid Unicode: lone surrogate {re.escape(where)}"):
            deepseek.encode_plain(text)
    with pytest.raises(TypeError, match="must be str, not int"):
        deepseek.encode_plain(123)  # type: ignore[arg-type]
