"""Token ids → text for the stream processor, one backend update at a time.

Wraps `recipe.detokenizer.IncrementalDetokenizer` with the reference's granularity: an update whose
ids end inside a multi-byte character yields no text at all; its text is emitted with the update that
completes the character (so the deltas group exactly as the reference's do).
"""

from __future__ import annotations

from typing import Any

from recipe.detokenizer import IncrementalDetokenizer


class UpdateDecoder:
    """All-or-nothing incremental decoding per update; special tokens stay as their spelling."""

    def __init__(self, tokenizer: Any) -> None:
        self._det = IncrementalDetokenizer(tokenizer, skip_special_tokens=False)
        self._held: list[str] = []

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
