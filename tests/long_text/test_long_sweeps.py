"""Bigger sweeps of the same equalities (run with `-m slow`): more examples, longer texts, more segment sizes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from long_text_material import adversarial_texts, fragment_texts, mixed_text

from recipe.detokenizer import IncrementalDetokenizer
from recipe.segments import DEEPSEEK_RULE, GPT2_RULE
from recipe.tokenizer import Tokenizer

pytestmark = pytest.mark.slow

long_adversarial = st.lists(fragment_texts, min_size=1, max_size=20).map("".join)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(adversarial_texts, long_adversarial), st.integers(min_value=1, max_value=300))
def test_tiny_segments_sweep(deepseek: Tokenizer, smollm: Tokenizer, text: str, segment_chars: int) -> None:
    for tok in (deepseek, smollm):
        assert tok.segments.encode(text, segment_chars=segment_chars, threshold_chars=0) == tok.encode_plain_one_pass(text)


@settings(max_examples=1000, deadline=None)
@given(long_adversarial)
def test_every_accepted_cut_keeps_pretokens_sweep(deepseek: Tokenizer, smollm: Tokenizer, text: str) -> None:
    for tok, rule in ((deepseek, DEEPSEEK_RULE), (smollm, GPT2_RULE)):
        pre = tok.plain.pre_tokenizer
        assert pre is not None
        whole = [p for p, _ in pre.pre_tokenize_str(text)]
        for pos in range(1, len(text)):
            if rule.is_safe(text, pos):
                left = [p for p, _ in pre.pre_tokenize_str(text[:pos])]
                right = [p for p, _ in pre.pre_tokenize_str(text[pos:])]
                assert left + right == whole, (text, pos)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("segment_chars", [64, 1_000, 8_192, 65_536])
def test_two_million_characters(deepseek: Tokenizer, smollm: Tokenizer, seed: int, segment_chars: int) -> None:
    text = mixed_text(2_000_000, seed=100 + seed)
    for tok in (deepseek, smollm):
        assert tok.segments.encode(text, segment_chars=segment_chars) == tok.encode_plain_one_pass(text)


def test_detokenize_a_million_ids(deepseek: Tokenizer) -> None:
    ids = deepseek.full.encode(mixed_text(3_500_000, seed=9), add_special_tokens=False).ids
    detok = IncrementalDetokenizer(deepseek)
    assert "".join([detok.add(i) for i in ids]) + detok.finish() == deepseek.decode(ids)
