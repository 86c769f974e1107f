"""`recipe.encoding._encode_texts`: one `tokenizers` call per short text (below the segment threshold in
total) gives the ids of the one batch call it replaces (`ONE_CALL_PER_TEXT_BELOW_THRESHOLD = False`) and of
one-pass encoding, text by text and in order, on drawn texts on both sides of the threshold."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe import encoding
from recipe.tokenizer import Tokenizer

# prose, code, digits, CJK, marks, whitespace runs, special-token look-alikes
PIECES = ["Hello", " world", "\n\n", "  ", "12345", "数据", "カタカナ", "é", "\u0301", "{\"a\": [1, 2]}", "<｜User｜>",
          "\t", "naïve", "🙂", "\r\n", "…", "x" * 40]
TEXT = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=30)), max_size=40).map("".join)


@pytest.fixture
def switch() -> Iterator[None]:
    yield
    encoding.ONE_CALL_PER_TEXT_BELOW_THRESHOLD = True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXT, max_size=12), long=st.integers(0, 3), at=st.integers(0, 12))
def test_one_call_per_text_equals_one_batch(tokenizer: Tokenizer, switch: None, texts: list[str], long: int, at: int) -> None:
    threshold = tokenizer.segments.threshold_chars
    if long:  # a batch over the threshold in total (or one text over it): the batch call's regime
        texts.insert(min(at, len(texts)), ("Lorem ipsum 42, dolor sit. " * 700)[: threshold // long + long])
    encoding.ONE_CALL_PER_TEXT_BELOW_THRESHOLD = True
    ours = encoding._encode_texts(texts, tokenizer)
    encoding.ONE_CALL_PER_TEXT_BELOW_THRESHOLD = False
    assert ours == encoding._encode_texts(texts, tokenizer)
    assert ours == [tokenizer.encode_plain_one_pass(t) for t in texts]
