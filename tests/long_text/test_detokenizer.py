"""The incremental detokenizer's output, joined, equals one-shot `decode`; it never emits a broken character."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from long_text_material import adversarial_texts, mixed_text
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from recipe.detokenizer import IncrementalDetokenizer, byte_level_alphabet
from recipe.tokenizer import Tokenizer


def _stream(tok: Tokenizer | HFTokenizer, ids: list[int], skip: bool = False) -> list[str]:
    detok = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    return [detok.add(i) for i in ids] + [detok.finish()]


def _decode(tok: Tokenizer | HFTokenizer, ids: list[int], skip: bool = False) -> str:
    return tok.decode(ids, skip_special_tokens=skip)


@settings(max_examples=300, deadline=None)
@given(adversarial_texts, st.booleans())
def test_text_ids_stream_back_whole(deepseek: Tokenizer, text: str, skip: bool) -> None:
    ids = deepseek.full.encode(text, add_special_tokens=False).ids  # special spellings become special ids
    chunks = _stream(deepseek, ids, skip)
    expected = _decode(deepseek, ids, skip)
    assert "".join(chunks) == expected
    if "\ufffd" not in expected:
        assert not any("\ufffd" in c for c in chunks)  # a character split across ids is held back, not broken


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=129_279), max_size=40), st.booleans())
def test_random_ids_match_one_shot_decode(deepseek: Tokenizer, ids: list[int], skip: bool) -> None:
    """Arbitrary ids, mostly invalid UTF-8 when joined: U+FFFD lands where one-shot decoding puts it."""
    assert "".join(_stream(deepseek, ids, skip)) == _decode(deepseek, ids, skip)


@settings(max_examples=150, deadline=None)
@given(st.one_of(adversarial_texts, st.lists(st.integers(min_value=0, max_value=129_279), max_size=25)))
def test_holding_means_an_incomplete_character(deepseek: Tokenizer, source: str | list[int]) -> None:
    """After each id: nothing held back exactly when the text so far is the one-shot decoding so far."""
    ids = deepseek.full.encode(source, add_special_tokens=False).ids if isinstance(source, str) else source
    detok = IncrementalDetokenizer(deepseek)
    shown = ""
    for n, token_id in enumerate(ids, 1):
        shown += detok.add(token_id)
        assert detok.holding == (shown != deepseek.decode(ids[:n]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=255), max_size=30))
def test_single_byte_ids_match_one_shot_decode(deepseek: Tokenizer, data: list[int]) -> None:
    """Ids of single bytes (continuation bytes, truncated and overlong sequences) against the Rust decoder."""
    char_of = {b: c for c, b in byte_level_alphabet().items()}
    found = [deepseek.full.token_to_id(char_of[b]) for b in data]
    ids = [i for i in found if i is not None]
    assert len(ids) == len(data)
    assert "".join(_stream(deepseek, ids)) == _decode(deepseek, ids)


@settings(max_examples=150, deadline=None)
@given(adversarial_texts, st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=20))
def test_add_many_equals_add(deepseek: Tokenizer, text: str, sizes: list[int]) -> None:
    ids = deepseek.full.encode(text, add_special_tokens=False).ids
    detok = IncrementalDetokenizer(deepseek)
    out, at, k = [], 0, 0
    while at < len(ids):
        n = sizes[k % len(sizes)]
        out.append(detok.add_many(ids[at : at + n]))
        at, k = at + n, k + 1
    out.append(detok.finish())
    assert "".join(out) == _decode(deepseek, ids)


@settings(max_examples=150, deadline=None)
@given(st.one_of(adversarial_texts, st.lists(st.integers(min_value=0, max_value=49_151), max_size=30)), st.booleans())
def test_demo_tokenizer(smollm: Tokenizer, source: str | list[int], skip: bool) -> None:
    ids = smollm.full.encode(source, add_special_tokens=False).ids if isinstance(source, str) else source
    chunks = _stream(smollm, ids, skip)
    expected = _decode(smollm, ids, skip)
    assert "".join(chunks) == expected
    if isinstance(source, str) and "\ufffd" not in expected:
        assert not any("\ufffd" in c for c in chunks)


def test_multibyte_character_split_across_ids(deepseek: Tokenizer) -> None:
    ids = deepseek.full.encode(" 😀", add_special_tokens=False).ids
    assert len(ids) == 2 and deepseek.decode(ids[:1]).endswith("\ufffd")  # the emoji's bytes straddle two ids
    detok = IncrementalDetokenizer(deepseek)
    assert detok.add(ids[0]) == " "
    assert detok.holding
    assert detok.add(ids[1]) == "😀"
    assert not detok.holding
    assert detok.finish() == ""


def test_incomplete_character_at_end_becomes_one_replacement(deepseek: Tokenizer) -> None:
    ids = deepseek.full.encode(" 😀", add_special_tokens=False).ids[:1]
    detok = IncrementalDetokenizer(deepseek)
    assert detok.add(ids[0]) == " "
    assert detok.finish() == "\ufffd" == deepseek.decode(ids)[-1]


def test_special_tokens_kept_or_skipped(deepseek: Tokenizer) -> None:
    ids = [0, 128803, 19923, 128804, 128821, 2058, 1]
    assert "".join(_stream(deepseek, ids)) == "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><think> world<｜end▁of▁sentence｜>"
    assert "".join(_stream(deepseek, ids, skip=True)) == deepseek.decode(ids, skip_special_tokens=True)


def test_long_generation(deepseek: Tokenizer) -> None:
    text = mixed_text(20_000, seed=7)
    ids = deepseek.full.encode(text, add_special_tokens=False).ids
    assert "".join(_stream(deepseek, ids)) == deepseek.decode(ids) == text


def test_bad_ids_get_a_clear_error(deepseek: Tokenizer) -> None:
    detok = IncrementalDetokenizer(deepseek)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        detok.add(129_280)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        detok.add_many([5, -1])
    detok.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        detok.add(5)


# Non-byte-level tokenizers: the prefix-window method.


def _trained(kind: str) -> HFTokenizer:
    corpus = [mixed_text(400, seed=s) for s in range(60)]
    if kind == "metaspace":
        tok = HFTokenizer(models.BPE(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]", "<s>", "</s>"])
    else:
        tok = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator(corpus, trainer)
    return tok


@pytest.fixture(scope="module", params=["metaspace", "wordpiece"])
def trained(request: pytest.FixtureRequest) -> HFTokenizer:
    return _trained(request.param)


@settings(max_examples=100, deadline=None)
@given(st.one_of(adversarial_texts, st.lists(st.integers(min_value=0, max_value=399), max_size=30)), st.booleans())
def test_prefix_window_method(trained: HFTokenizer, source: str | list[int], skip: bool) -> None:
    ids = trained.encode(source).ids if isinstance(source, str) else source
    ids = [i for i in ids if i < trained.get_vocab_size()]
    detok = IncrementalDetokenizer(trained, skip_special_tokens=skip)
    assert not detok.byte_level
    chunks = []
    for i in ids:
        chunks.append(detok.add(i))
        if not detok.holding:
            assert "".join(chunks) == trained.decode(ids[: len(chunks)], skip_special_tokens=skip)
    chunks.append(detok.finish())
    assert "".join(chunks) == trained.decode(ids, skip_special_tokens=skip)
