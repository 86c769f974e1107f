"""`count_ids` (the reasoning-token count at a stream's end) equals the length of a plain `encode`, with
recipe.stream.id_count's Python count on and off."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.stream.id_count import IdCounter, id_counter
from recipe.stream.usage import count_ids

_PIECES = st.sampled_from(["</think>", "<｜DSML｜", "｜DSML｜", "<｜end▁of▁sentence｜>", "\n\n", " ", "数据", "résumé",
                           "😀", "123456", "Let me think.", "\ue001", "\t", "<｜User｜>", "<think>", "<｜ref｜>",
                           "<｜/ref｜>", "<dsml:", "</dsml:", "<|EOT|>", "<｜", "<|", "｜", "٣٤٥", "²³", "゛ア", "\u0301",
                           "\u200b", "\x0b", "\x1c", "\r\n", "  \n", "ஂ்", "𝔘𝔫", "\U0001faf8", "\u0558", "ﬀ"])
# every kind of character the splits tell apart: digits (ASCII and not), CJK and kana, letters, marks,
# punctuation, symbols, spaces of each kind, controls, format characters, unassigned ones
_CHARS = st.characters(codec="utf-8")


def _encoded(tokenizer: Any, text: str) -> int:
    return len(tokenizer.full.encode(text, add_special_tokens=False).ids)


@pytest.fixture(params=[True, False], ids=["python-count", "tokenizer-count"])  # the same for every example
def counting(request: pytest.FixtureRequest) -> Iterator[bool]:
    IdCounter.enabled = request.param
    yield request.param
    IdCounter.enabled = True


def test_the_v4_tokenizer_gets_a_counter(v4_tokenizer: Any) -> None:
    assert id_counter(v4_tokenizer.full) is not None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.one_of(st.text(_CHARS, max_size=20), _PIECES), max_size=12))
def test_count_ids_equals_encode_length(v4_tokenizer: Any, counting: bool, parts: list[str]) -> None:
    text = "".join(parts)
    assert count_ids(v4_tokenizer, text) == _encoded(v4_tokenizer, text)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(st.text(_CHARS, max_size=8), _PIECES), max_size=10))
def test_python_pieces_and_added_split_equal_the_tokenizer(v4_tokenizer: Any, parts: list[str]) -> None:
    """The counter's pre-tokens are the tokenizer's, piece for piece, and its added tokens are the tokenizer's."""
    text = "".join(parts)
    counter = id_counter(v4_tokenizer.full)
    assert counter is not None
    if counter.count(text) is None:  # unassigned characters: the tokenizer counts
        return
    split = counter.added_split(text)
    assert "".join(part for part, _ in split) == text
    added_ids = set(v4_tokenizer.full.get_added_tokens_decoder())
    expected, at = [], 0
    for part, added in split:
        if added:
            expected.append(((at, at + len(part)), v4_tokenizer.full.token_to_id(part)))
        else:
            pieces = [p for p, _ in v4_tokenizer.full.pre_tokenizer.pre_tokenize_str(part)]
            assert [_byte_level(p) for p in counter.pieces(part)] == pieces
        at += len(part)
    encoding = v4_tokenizer.full.encode(text, add_special_tokens=False)
    assert [(off, i) for i, off in zip(encoding.ids, encoding.offsets, strict=True) if i in added_ids] == expected


def _code_points(step: int, offset: int, end: int = 0x110000) -> Iterator[str]:
    for cp in range(offset, end, step):
        if not 0xD800 <= cp < 0xE000:
            yield chr(cp)


_CONTEXTS = ["{}", "a{}b", " {}", "{} ", "1{}1", "{}a", "\n{}\n", "{}{}", ".{}x", "{}\u0301", "数{}", "{}  x"]


def _check_code_points(tokenizer: Any, chars: Iterator[str]) -> None:
    """Every character in every context: the counter's pre-tokens (and count) equal the tokenizer's, or it
    declines (an unassigned character)."""
    counter = id_counter(tokenizer.full)
    assert counter is not None
    pre = tokenizer.full.pre_tokenizer
    wrong = []
    for char in chars:
        for context in _CONTEXTS:
            text = context.replace("{}", char)
            counted = counter.count(text)
            if counted is None:
                continue
            pieces = [p for p, _ in pre.pre_tokenize_str(text)]
            if [_byte_level(p) for p in counter.pieces(text)] != pieces or counted != _encoded(tokenizer, text):
                wrong.append((hex(ord(char)), context))
                break
    assert not wrong, wrong[:20]


def test_every_code_point_sampled(v4_tokenizer: Any) -> None:
    """Every code point below U+0800 (ASCII, Latin, Greek, Cyrillic, ...), every White_Space character and
    one code point in 97 (a different residue each run), all contexts: fast enough for every run."""
    _check_code_points(v4_tokenizer, _code_points(1, 0, 0x800))
    _check_code_points(v4_tokenizer, iter("\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                                          "\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b\u2060\ufeff"))
    _check_code_points(v4_tokenizer, _code_points(97, random.randrange(97)))


@settings(max_examples=400, deadline=None)
@given(text=st.text(st.characters(max_codepoint=0x7F), max_size=40))
def test_ascii_texts(v4_tokenizer: Any, text: str) -> None:
    """ASCII text takes stdlib `re` patterns: its pieces and count equal the tokenizer's."""
    counter = id_counter(v4_tokenizer.full)
    assert counter is not None
    pieces = [p for p, _ in v4_tokenizer.full.pre_tokenizer.pre_tokenize_str(text)]
    if not counter.added_split(text)[1:]:  # no added token in it
        assert [_byte_level(p) for p in counter.pieces(text)] == pieces
    assert counter.count(text) == _encoded(v4_tokenizer, text)


@pytest.mark.slow
def test_every_code_point(v4_tokenizer: Any) -> None:
    """All 1,112,064 code points (a few minutes): run when `regex`, `tokenizers` or Python changes."""
    _check_code_points(v4_tokenizer, _code_points(1, 0))


def test_unassigned_characters_go_to_the_tokenizer(v4_tokenizer: Any) -> None:
    counter = id_counter(v4_tokenizer.full)
    assert counter is not None
    assert counter.count("a\u0558b") is None  # assigned after Unicode 14.0: `regex` and Oniguruma disagree
    assert counter.count("a\U0001faf8b") is None
    assert count_ids(v4_tokenizer, "a\u0558b") == _encoded(v4_tokenizer, "a\u0558b")


def _byte_level(piece: str) -> str:
    from recipe.detokenizer import byte_level_alphabet

    chars = {byte: char for char, byte in byte_level_alphabet().items()}
    return "".join(chars[b] for b in piece.encode("utf-8"))


def test_other_pipelines_get_no_counter(v4_tokenizer: Any) -> None:
    """Only the proven pipeline is counted in Python: another pre-tokenizer, or none, gets the tokenizer."""
    import json

    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    assert id_counter(HFTokenizer(models.BPE())) is None
    spec = json.loads(v4_tokenizer.full.to_str())
    spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,2}"
    changed = HFTokenizer.from_str(json.dumps(spec))
    assert id_counter(changed) is None
    spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,3}"
    spec["added_tokens"][0]["lstrip"] = True
    assert id_counter(HFTokenizer.from_str(json.dumps(spec))) is None
