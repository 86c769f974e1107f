"""Token ids → text for the stream processor, one backend update at a time.

Wraps `recipe.detokenizer.IncrementalDetokenizer` with the reference's granularity: an update whose
ids end inside a multi-byte character yields no text at all; its text is emitted with the update that
completes the character (so the deltas group exactly as the reference's do).
"""

from __future__ import annotations

import weakref
from typing import Any

from recipe.detokenizer import IncrementalDetokenizer

# Per tokenizer: id -> its text, for ids whose bytes are complete UTF-8 on their own (filled lazily).
_WHOLE_TEXT: weakref.WeakKeyDictionary[Any, dict[int, str | None]] = weakref.WeakKeyDictionary()


def _whole_text_table(tokenizer: Any) -> dict[int, str | None]:
    try:
        table = _WHOLE_TEXT.get(tokenizer)
        if table is None:
            table = _WHOLE_TEXT[tokenizer] = {}
    except TypeError:  # not weak-referenceable: no sharing across processors
        table = {}
    return table


class UpdateDecoder:
    """All-or-nothing incremental decoding per update; special tokens stay as their spelling."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self._det = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
        self._held: list[str] = []
        # Byte-level decoding is stateless between characters, so while nothing is held a token whose
        # bytes are a whole UTF-8 text can skip the detokenizer: its text is looked up once.
        self._whole = _whole_text_table(tokenizer) if getattr(self._det, "byte_level", False) else None

    @property
    def whole_texts(self) -> dict[int, str | None]:
        """id -> text of tokens whose bytes are whole UTF-8 (None: not whole; absent: not looked up);
        valid only while `busy` is False. Empty for tokenizers that are not byte-level."""
        return self._whole if self._whole is not None else {}

    @property
    def busy(self) -> bool:
        """Whether part of a character is held (then a token's text depends on what came before)."""
        return bool(self._held) or self._det.holding

    def add_one(self, token_id: int) -> str:
        """`add_many([token_id])`, with a table lookup for the common whole-character token."""
        whole = self._whole
        if whole is not None and not self._held and not self._det.holding:
            text = whole.get(token_id, "")
            if text == "":
                text = whole[token_id] = self._whole_text(token_id)
            if text is not None:
                return text
        return self.add_many([token_id])

    def _whole_text(self, token_id: int) -> str | None:
        if not 0 <= token_id < self._det.vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary (0..{self._det.vocab_size - 1})")
        text = self._tok.decode([token_id])
        return None if not text or "\ufffd" in text else text

    def add_many(self, ids: list[int]) -> str:
        """Text of `ids`, or "" while a character is still incomplete (then it comes later, whole)."""
        text = self._det.add_many(ids)
        if self._det.holding:
            self._held.append(text)
            return ""
        if self._held:
            self._held.append(text)
            text = "".join(self._held)
            self._held = []
        return text

    def finish(self) -> str:
        """What is still held at the end (an incomplete character becomes U+FFFD)."""
        text = "".join(self._held) + self._det.finish()
        self._held = []
        return text
