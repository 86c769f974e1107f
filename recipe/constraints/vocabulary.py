"""Token bytes of a tokenizer, as the constraint backends need them.

Byte-level BPE tokens (GPT-2 alphabet) are decoded to their bytes; byte-fallback/Metaspace tokens
(`<0x41>`, `▁`) likewise. Added tokens (special or not: BOS, EOS, PAD, `<think>`, placeholders) are
*excluded*: no JSON/regex constraint may ever allow them as text. Their spelling is kept separately so an
accepted prefix can still be shown as text.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import dataclass, field

from recipe.constraints.kinds import ConstraintError
from recipe.detokenizer import byte_level_alphabet
from recipe.tokenizer import Tokenizer

# EOS spellings in order of preference when the caller does not name the stop ids.
EOS_SPELLINGS = ("<｜end▁of▁sentence｜>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<|end_of_text|>")


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Byte view of a tokenizer. `token_bytes[i]` is None for excluded (added) ids and ids with no token."""

    vocab_size: int
    token_bytes: tuple[bytes | None, ...]
    added_bytes: dict[int, bytes]
    eos_token_ids: tuple[int, ...]
    tokenizer_json: str
    byte_level: bool
    _cache: dict[str, object] = field(default_factory=dict, repr=False)

    def piece(self, token_id: int) -> bytes:
        """Bytes a token stands for in accepted text (added tokens: their spelling)."""
        b = self.token_bytes[token_id] if 0 <= token_id < self.vocab_size else None
        if b is not None:
            return b
        return self.added_bytes.get(token_id, b"")

    def backend_state(self, key: str, build):  # type: ignore[no-untyped-def]
        """Per-vocabulary, per-backend objects (tokenizer wrappers), built once, thread-safely."""
        with _LOCK:
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]


_LOCK = threading.RLock()
_BY_TOKENIZER: weakref.WeakKeyDictionary[Tokenizer, dict[tuple[int, ...] | None, Vocabulary]] = (
    weakref.WeakKeyDictionary()
)


def default_eos_ids(tokenizer: Tokenizer) -> tuple[int, ...]:
    """The tokenizer's end-of-sequence id: the first known EOS spelling in its added vocabulary."""
    for s in EOS_SPELLINGS:
        if s in tokenizer.added_ids:
            return (tokenizer.added_ids[s],)
    raise ConstraintError(
        "cannot tell the tokenizer's end-of-sequence token; pass eos_token_ids explicitly"
    )


def _decode_piece(tok: str, byte_level: bool, decoder: dict[str, int]) -> bytes | None:
    if byte_level:
        try:
            return bytes(decoder[c] for c in tok)
        except KeyError:
            return None  # not a byte-level spelling (e.g. DeepSeek's ids 0-2): never text
    if len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
        return bytes([int(tok[3:5], 16)])
    return tok.replace("▁", " ").encode("utf-8")


def vocabulary_of(tokenizer: Tokenizer, eos_token_ids: tuple[int, ...] | None = None) -> Vocabulary:
    """The (cached) byte view of `tokenizer`; `eos_token_ids` defaults to `default_eos_ids`."""
    with _LOCK:
        per = _BY_TOKENIZER.setdefault(tokenizer, {})
        if eos_token_ids in per:
            return per[eos_token_ids]
    eos = tuple(eos_token_ids) if eos_token_ids is not None else default_eos_ids(tokenizer)
    spec = json.loads(tokenizer.full.to_str())
    model = spec.get("model") or {}
    vocab: dict[str, int] = model.get("vocab") or {}
    if not isinstance(vocab, dict):
        raise ConstraintError("only BPE/WordPiece-style tokenizers with a vocab map are supported")
    decoder_spec = json.dumps(spec.get("decoder")) + json.dumps(spec.get("pre_tokenizer"))
    byte_level = "ByteLevel" in decoder_spec
    table = byte_level_alphabet()
    size = tokenizer.vocab_size
    pieces: list[bytes | None] = [None] * size
    for tok, i in vocab.items():
        if 0 <= i < size:
            pieces[i] = _decode_piece(tok, byte_level, table)
    added: dict[int, bytes] = {}
    for content, i in tokenizer.added_ids.items():
        if 0 <= i < size:
            pieces[i] = None
            added[i] = content.encode("utf-8")
    for e in eos:
        if not 0 <= e < size:
            raise ConstraintError(f"eos token id {e} is outside the vocabulary (size {size})")
        pieces[e] = None
    v = Vocabulary(size, tuple(pieces), added, eos, tokenizer.full.to_str(), byte_level)
    with _LOCK:
        per[eos_token_ids] = v
    return v
