"""`count_ids` (the reasoning-token count at a stream's end) equals the length of a plain `encode`."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recipe.stream.usage import count_ids

_PIECES = st.sampled_from(["</think>", "<｜DSML｜", "｜DSML｜", "<｜end▁of▁sentence｜>", "\n\n", " ", "数据", "résumé",
                           "😀", "123456", "Let me think.", "\ue001", "\t"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=20), _PIECES), max_size=12))
def test_count_ids_equals_encode_length(v4_tokenizer: Any, parts: list[str]) -> None:
    text = "".join(parts)
    assert count_ids(v4_tokenizer, text) == len(v4_tokenizer.full.encode(text, add_special_tokens=False).ids)
