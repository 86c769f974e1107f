"""Incremental detokenization: output ids to text, one id at a time, never a broken character.

For a byte-level BPE tokenizer (decoder `ByteLevel`) every id maps to a fixed byte string (a table built
once per tokenizer, the same rule the `tokenizers` ByteLevel decoder applies: a token whose characters
are all in the GPT-2 byte alphabet stands for those bytes, any other token, e.g. `<｜User｜>`, for its
UTF-8 spelling). The bytes go through an incremental UTF-8 decoder that holds back an incomplete
trailing sequence, so a character split across ids is emitted whole once its last byte arrives.
Invalid UTF-8 becomes U+FFFD exactly where one-shot decoding puts it (maximal-subpart substitution,
as Rust's `from_utf8_lossy`); an incomplete sequence left at the end becomes U+FFFD at `finish()`.

Other tokenizers use the prefix-window method: decode the last few ids with and without the new one
and emit the difference once it no longer ends in U+FFFD.

The concatenation of everything `add`/`add_many`/`finish` return equals `tokenizer.decode(ids)`.
An id outside the vocabulary raises `ValueError` (one-shot decoding would silently drop it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import weakref
from _codecs import utf_8_decode
from collections.abc import Iterable
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from recipe.tokenizer import Tokenizer


@functools.cache
def byte_level_alphabet() -> dict[str, int]:
    """The GPT-2 byte-to-character map, inverted: character -> byte (built once; callers must not mutate it)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _is_byte_level_decoder(decoder: dict[str, Any] | None) -> bool:
    if not decoder:
        return False
    if decoder.get("type") == "Sequence":
        steps = decoder.get("decoders") or []
        return len(steps) == 1 and _is_byte_level_decoder(steps[0])
    return decoder.get("type") == "ByteLevel"


class _ByteTable:
    """Per-id bytes, and per-id text where those bytes are complete UTF-8 on their own; built once."""

    def __init__(self, hf: HFTokenizer, vocab_size: int) -> None:
        alphabet = byte_level_alphabet()
        table: list[bytes] = [b""] * vocab_size  # ids without a token decode to nothing
        for token, token_id in hf.get_vocab(with_added_tokens=True).items():
            if 0 <= token_id < vocab_size:
                try:
                    table[token_id] = bytes(alphabet[c] for c in token)
                except KeyError:
                    table[token_id] = token.encode("utf-8")
        self.table = table
        self.text: list[str | None] = [_complete_text(b) for b in table]


def _complete_text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


_BYTE_TABLES: weakref.WeakKeyDictionary[HFTokenizer, _ByteTable] = weakref.WeakKeyDictionary()


def _byte_table(hf: HFTokenizer, vocab_size: int) -> _ByteTable | None:
    """The byte table of a byte-level tokenizer, or None when its decoder is not plain ByteLevel."""
    try:
        cached = _BYTE_TABLES.get(hf)
    except TypeError:  # not weak-referenceable
        cached = None
    if cached is not None:
        return cached
    decoder = json.loads(hf.to_str()).get("decoder")
    if not _is_byte_level_decoder(decoder):
        return None
    built = _ByteTable(hf, vocab_size)
    with contextlib.suppress(TypeError):
        _BYTE_TABLES[hf] = built
    return built


class IncrementalDetokenizer:
    """Streaming `decode`: `add(id)` returns the text that is safe to emit now.

    `tokenizer` is a `recipe.tokenizer.Tokenizer` (its `full` vocabulary is used) or a
    `tokenizers.Tokenizer`. With `skip_special_tokens`, ids of added tokens marked special are dropped,
    as `decode(..., skip_special_tokens=True)` does.
    """

    # Ids kept as context for the prefix-window method.
    _WINDOW = 6

    def __init__(self, tokenizer: Tokenizer | HFTokenizer, skip_special_tokens: bool = False) -> None:
        if isinstance(tokenizer, HFTokenizer):
            hf = tokenizer
            vocab_size = hf.get_vocab_size(with_added_tokens=True)
        else:  # a recipe Tokenizer, or anything shaped like one
            hf, vocab_size = tokenizer.full, int(tokenizer.vocab_size)
        self._hf = hf
        self.vocab_size = vocab_size
        self.skip_special_tokens = skip_special_tokens
        self._skipped: frozenset[int] = (
            frozenset(i for i, t in hf.get_added_tokens_decoder().items() if t.special)
            if skip_special_tokens
            else frozenset()
        )
        table = _byte_table(hf, vocab_size)
        self.byte_level = table is not None
        self._table: list[bytes] = table.table if table is not None else []
        self._text: list[str | None] = table.text if table is not None else []
        self._pending = b""  # bytes of an incomplete UTF-8 sequence, held back
        # prefix-window state (non-byte-level tokenizers)
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self._finished = False

    @property
    def holding(self) -> bool:
        """True while something is held back: bytes of an incomplete character, or ids not yet shown."""
        if self.byte_level:
            return bool(self._pending)
        return self._read < len(self._ids)

    def _check(self, token_id: int) -> None:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary (0..{self.vocab_size - 1})")
        if self._finished:
            raise RuntimeError("IncrementalDetokenizer.add after finish()")

    def add(self, token_id: int) -> str:
        """Feed one id; return the newly completed text (possibly empty)."""
        self._check(token_id)
        if not self.byte_level:
            self._ids.append(token_id)
            return self._window_step()
        if token_id in self._skipped:
            return ""
        if not self._pending:
            text = self._text[token_id]
            if text is not None:
                return text
        return self._decode_bytes(self._table[token_id])

    def add_many(self, ids: Iterable[int]) -> str:
        """Feed several ids; same text as calling `add` for each and joining the results."""
        ids = list(ids)
        for token_id in ids:
            self._check(token_id)
        if not self.byte_level:
            self._ids.extend(ids)
            return self._window_step()
        skipped, table = self._skipped, self._table
        return self._decode_bytes(b"".join([table[i] for i in ids if i not in skipped]))

    def finish(self) -> str:
        """End of stream: return what was held back (an incomplete character becomes U+FFFD)."""
        if self._finished:
            return ""
        self._finished = True
        if self.byte_level:
            text, _ = utf_8_decode(self._pending, "replace", True)
            self._pending = b""
            return text
        done = self._decode(self._ids[self._prefix : self._read])
        return self._decode(self._ids[self._prefix :])[len(done) :]

    def _decode_bytes(self, data: bytes) -> str:
        """UTF-8 of pending + data, holding back a trailing sequence that may still complete."""
        data = self._pending + data
        text, used = utf_8_decode(data, "replace", False)
        self._pending = data[used:]
        return text

    def _decode(self, ids: list[int]) -> str:
        return self._hf.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def _window_step(self) -> str:
        done = self._decode(self._ids[self._prefix : self._read])
        text = self._decode(self._ids[self._prefix :])
        if len(text) <= len(done) or text.endswith("\ufffd") or not text.startswith(done):
            return ""
        self._prefix = max(self._read, len(self._ids) - self._WINDOW)
        self._read = len(self._ids)
        # keep the window small: ids before the prefix are never decoded again
        if self._prefix > 4 * self._WINDOW:
            del self._ids[: self._prefix]
            self._read -= self._prefix
            self._prefix = 0
        return text[len(done) :]
