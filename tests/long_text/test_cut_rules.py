"""Every cut the rules accept keeps the pre-tokens whole, checked against the tokenizer's own pre-tokenizer."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from long_text_material import adversarial_texts

from recipe.segments import DEEPSEEK_RULE, GPT2_RULE, CutRule, cut_rule_for, plan_cuts
from recipe.tokenizer import Tokenizer, deepseek_v4_tokenizer_path


def _pieces(tok: Tokenizer, text: str) -> list[str]:
    pre = tok.plain.pre_tokenizer
    assert pre is not None
    return [p for p, _ in pre.pre_tokenize_str(text)] if text else []


def _assert_cuts_keep_pretokens(tok: Tokenizer, rule: CutRule, text: str) -> int:
    whole = _pieces(tok, text)
    accepted = 0
    for pos in range(1, len(text)):
        if rule.is_safe(text, pos):
            accepted += 1
            assert _pieces(tok, text[:pos]) + _pieces(tok, text[pos:]) == whole, (text, pos)
    return accepted


@settings(max_examples=300, deadline=None)
@given(adversarial_texts)
def test_deepseek_cuts_keep_pretokens(deepseek: Tokenizer, text: str) -> None:
    _assert_cuts_keep_pretokens(deepseek, DEEPSEEK_RULE, text)


@settings(max_examples=200, deadline=None)
@given(adversarial_texts)
def test_gpt2_cuts_keep_pretokens(smollm: Tokenizer, text: str) -> None:
    _assert_cuts_keep_pretokens(smollm, GPT2_RULE, text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789"), min_size=2, max_size=40), st.sampled_from(["", "x", " ", "你", "\n", "١", "²"]))
def test_cuts_inside_digit_runs_follow_groups_of_three(deepseek: Tokenizer, digits: str, before: str) -> None:
    text = before + digits + "a"
    _assert_cuts_keep_pretokens(deepseek, DEEPSEEK_RULE, text)
    if before in ("", "x", " ", "你", "\n"):  # the run start is certain: every third position inside it is a cut
        inner = [p for p in range(len(before) + 1, len(before) + len(digits)) if DEEPSEEK_RULE.is_safe(text, p)]
        assert inner == list(range(len(before) + 3, len(before) + len(digits), 3))
    else:  # a non-ASCII numeral before the run: its groups are unknown, no cut inside
        assert not any(DEEPSEEK_RULE.is_safe(text, p) for p in range(len(before) + 1, len(before) + len(digits)))


def test_rules_find_cuts_in_ordinary_text(deepseek: Tokenizer) -> None:
    text = "Hello world, this is a test.\nNext line: 12345 and 你好世界。\n" * 50
    bounds = plan_cuts(text, DEEPSEEK_RULE, 10)
    assert len(bounds) > len(text) // 20
    for cut in bounds[1:-1]:
        assert DEEPSEEK_RULE.is_safe(text, cut)


def test_no_cut_inside_one_long_pretoken() -> None:
    for text in ("你" * 5000, " " * 5000, "a" * 5000, "\n" * 5000, "." * 5000):
        assert plan_cuts(text, DEEPSEEK_RULE, 100) == [0, len(text)]
        assert plan_cuts(text, GPT2_RULE, 100) == [0, len(text)]


def test_search_skips_ahead_through_many_rejected_runs(deepseek: Tokenizer) -> None:
    """"٣ ٣ ٣ ...": a run end every character, none safe (٣ may be \\p{N}); the search jumps ahead, still exact."""
    text = "٣ " * 3000 + "Hello world. " * 500
    bounds = plan_cuts(text, DEEPSEEK_RULE, 50)
    assert bounds[1] > 6000 and len(bounds) > 50
    assert all(DEEPSEEK_RULE.is_safe(text, c) for c in bounds[1:-1])
    assert deepseek.segments.encode(text, segment_chars=50, threshold_chars=0) == deepseek.encode_plain_one_pass(text)


def test_rule_recognition() -> None:
    spec = json.loads(deepseek_v4_tokenizer_path().read_text(encoding="utf-8"))
    assert cut_rule_for(spec) is DEEPSEEK_RULE
    from long_text_material import smollm_tokenizer_json

    assert cut_rule_for(json.loads(smollm_tokenizer_json())) is GPT2_RULE


@pytest.mark.parametrize(
    "change",
    [
        {"normalizer": {"type": "NFKC"}},
        {"truncation": {"max_length": 8, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}},
        {"pre_tokenizer": {"type": "Whitespace"}},
        {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}},
    ],
)
def test_unrecognised_tokenizers_are_not_cut(change: dict[str, object]) -> None:
    spec = json.loads(deepseek_v4_tokenizer_path().read_text(encoding="utf-8"))
    spec.update(change)
    assert cut_rule_for(spec) is None


def test_unrecognised_tokenizer_encodes_in_one_pass() -> None:
    from long_text_material import smollm_tokenizer_json

    spec = json.loads(smollm_tokenizer_json())
    spec["normalizer"] = {"type": "NFKC"}
    tok = Tokenizer(json.dumps(spec))
    text = "ﬁne ①② text " * 500
    assert tok.segments.bounds(text, threshold_chars=0) == [0, len(text)]
    assert tok.encode_plain(text) == tok.encode_plain_one_pass(text)
