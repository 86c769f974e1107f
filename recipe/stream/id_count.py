"""How many ids a text encodes to, with the DeepSeek V3/V4 pre-tokenizer run in Python (the reasoning-token count).

`count_ids` (recipe.stream.usage) is `len(tokenizer.full.encode(text, add_special_tokens=False).ids)`, paid
once at the end of every thinking stream. For the DeepSeek V3/V4 `tokenizer.json` that pipeline is: added
tokens split out; Split(\\p{N}{1,3}) ▸ Split(CJK runs) ▸ Split(GPT-style pattern), each Isolated (every
match and every stretch between matches is a piece, and each split works inside the previous one's
pieces); ByteLevel without regex (bytes to characters); BPE per piece. The three Oniguruma splits are
~90% of that call (~20 µs for a 75-character text in a loop, ~45 µs at a stream's end where its tables
are out of cache). `IdCounter` runs the same three splits with the `regex` module (stdlib `re` on ASCII
text, where the classes are plain ranges) and counts each
piece's BPE ids with the tokenizer's own model once (cached per piece, bounded), so the sum is the
tokenizer's count. Added tokens are split out first as the tokenizer does (leftmost-longest, the
raw-matched ones, then the normalized ones in what is left; no normalizer, so the same text), one id
each. A text holding a character unassigned in Unicode 14.0 goes to the tokenizer: `regex` knows a
newer Unicode than the tokenizer's Oniguruma, and the two classify exactly those characters differently
(every code point compared, in several contexts, for the installed versions); characters assigned
since keep their classes, so later versions of either only add characters this rule already sends to
the tokenizer. Whether a character is assigned is read from `unicodedata` when it is 14.0.0 (Python
3.11), once per character seen; with another `unicodedata` there is no counter.

`id_counter(hf)` gives a counter only for a tokenizer whose pre-tokenizer is exactly
`recipe.encoding`'s proven one, without normalizer, truncation or padding, with a BPE model without
dropout and added tokens that strip nothing and match anywhere; else None (the caller encodes). `IdCounter.enabled = False` is the off switch.
Proven equal: tests/stream/test_usage_count.py (every code point in several contexts against the
tokenizer's pieces, and drawn texts against `encode`).
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
import weakref
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from recipe.detokenizer import byte_level_alphabet
from recipe.encoding import _PROVEN_PRE_TOKENIZER

_MAX_PIECES = 1 << 15  # cached pieces per tokenizer (cleared whole when full)
_MAX_PIECE_CHARS = 64  # longer pieces are counted but not cached


@dataclass(frozen=True)
class _Splits:
    """The three splits' patterns (`cjk` None: it never matches), and one finding where the first two split."""

    digits_or_cjk: Any
    digits: Any
    cjk: Any
    words: Any


_SPLITS = [
    regex.compile(step["pattern"]["Regex"]) for step in _PROVEN_PRE_TOKENIZER["pretokenizers"] if step["type"] == "Split"
]
_UNICODE_SPLITS = _Splits(regex.compile(r"[\p{N}一-龥぀-ゟ゠-ヿ]"), _SPLITS[0], _SPLITS[1], _SPLITS[2])
# ASCII text (~2.5x faster with stdlib `re`): there \p{N} is 0-9, \p{L} is A-Za-z, \p{M} and the CJK ranges
# are empty, \p{P} with \p{S} is the 32 punctuation characters, \s is White_Space's six (re.ASCII's \s)
_PUNCT = re.escape(string.punctuation)
_ASCII_SPLITS = _Splits(
    re.compile("[0-9]"),
    re.compile("[0-9]{1,3}"),
    None,
    re.compile(f"[{_PUNCT}][A-Za-z]+|[^\r\nA-Za-z{_PUNCT}]?[A-Za-z]+| ?[{_PUNCT}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
               re.ASCII),
)


_UNICODE = "14.0.0"  # the version whose unassigned characters go to the tokenizer (see the module docstring)


class IdCounter:
    """Counts ids of texts for one tokenizer (see the module docstring)."""

    enabled: ClassVar[bool] = True

    def __init__(self, hf: Any) -> None:
        self._model = hf.model
        self._counts: dict[str, int] = {}
        # ByteLevel: a piece's UTF-8 bytes, read as Latin-1, then each byte to its character
        self._bytes = {byte: ord(char) for char, byte in byte_level_alphabet().items()}
        # characters known to be assigned in Unicode `_UNICODE` (grows as texts show new ones)
        self._assigned: set[str] = set()
        tokens = list(hf.get_added_tokens_decoder().values())
        # added tokens are split out first: those matched on the raw text, then (in what is left) those
        # matched on the normalized text, which is the same text here (no normalizer)
        self._raw = _AddedSet([str(tok.content) for tok in tokens if not tok.normalized])
        self._normalized = _AddedSet([str(tok.content) for tok in tokens if tok.normalized])
        firsts = "".join(sorted(set(self._raw.firsts + self._normalized.firsts)))
        self._added_first = regex.compile("[" + "".join(regex.escape(c) for c in firsts) + "]")

    def count(self, text: str) -> int | None:
        """Ids of `text` (encoded without special-token templates), or None where a character of it is
        unassigned in Unicode `_UNICODE` (the caller encodes it then)."""
        if not text.isascii():
            fresh = set(text) - self._assigned
            if fresh:
                category = unicodedata.category
                for char in fresh:
                    if category(char) in ("Cn", "Cs"):  # surrogates: not text (encode raises)
                        return None
                if len(self._assigned) < _MAX_PIECES:
                    self._assigned |= fresh
        if self._added_first.search(text) is None:
            return self._count_plain(text)
        total = 0
        for start, end, added in self._raw.split(text):
            if added:
                total += 1
                continue
            for start2, end2, added2 in self._normalized.split(text[start:end]):
                total += 1 if added2 else self._count_plain(text[start + start2 : start + end2])
        return total

    def _count_plain(self, text: str) -> int:
        """Ids of text without added tokens: the three splits, each piece through BPE."""
        splits = _ASCII_SPLITS if text.isascii() else _UNICODE_SPLITS
        if splits.digits_or_cjk.search(text) is None:
            return self._count_words(text, splits.words)
        total = 0
        for piece in _isolate(splits.digits, text):
            if splits.digits.fullmatch(piece) is not None:
                total += self._piece(piece)  # a digit group is one piece to the end
                continue
            for part in _isolate(splits.cjk, piece) if splits.cjk is not None else [piece]:
                total += self._count_words(part, splits.words)
        return total

    def pieces(self, text: str) -> list[str]:
        """The pre-tokens `count` sums over (before ByteLevel) of text without added tokens, split
        plainly with the patterns `count` uses for it: for the tests."""
        splits = _ASCII_SPLITS if text.isascii() else _UNICODE_SPLITS
        out: list[str] = []
        for piece in _isolate(splits.digits, text):
            for part in _isolate(splits.cjk, piece) if splits.cjk is not None else [piece]:
                out += _isolate(splits.words, part)
        return out

    def added_split(self, text: str) -> list[tuple[str, bool]]:
        """`text` as stretches and added tokens (True), in the tokenizer's order of matching: for the tests."""
        out: list[tuple[str, bool]] = []
        for start, end, added in self._raw.split(text):
            if added:
                out.append((text[start:end], True))
                continue
            out += [(text[start + a : start + b], hit) for a, b, hit in self._normalized.split(text[start:end])]
        return out

    def _count_words(self, text: str, pattern: Any) -> int:
        """Ids of one piece of the first two splits: the third split's (`pattern`) pieces, each through BPE."""
        words = pattern.findall(text)
        covered = 0
        for word in words:
            covered += len(word)
        if covered != len(text):  # characters no alternative matches: stretches between matches are pieces
            words = _isolate(pattern, text)
        total = 0
        counts = self._counts
        for word in words:
            n = counts.get(word)
            if n is None:
                n = self._piece(word)
            total += n
        return total

    def _piece(self, piece: str) -> int:
        n = self._counts.get(piece)
        if n is not None:
            return n
        n = len(self._model.tokenize(piece.encode("utf-8").decode("latin-1").translate(self._bytes)))
        if len(piece) <= _MAX_PIECE_CHARS:
            if len(self._counts) >= _MAX_PIECES:
                self._counts.clear()
            self._counts[piece] = n
        return n


class _AddedSet:
    """Added-token spellings matched leftmost-longest, as the tokenizer's Aho-Corasick split does (a walk
    over the spellings' prefixes from each character that starts one)."""

    def __init__(self, contents: list[str]) -> None:
        self.contents = frozenset(c for c in contents if c)
        self.prefixes = frozenset(c[:k] for c in self.contents for k in range(1, len(c) + 1))
        self.firsts = "".join(sorted({c[0] for c in self.contents}))
        self._first = regex.compile("[" + "".join(regex.escape(c) for c in self.firsts) + "]") if self.firsts else None

    def split(self, text: str) -> list[tuple[int, int, bool]]:
        """(start, end, is an added token) spans covering `text` in order; no empty stretches."""
        if self._first is None:
            return [(0, len(text), False)] if text else []
        out: list[tuple[int, int, bool]] = []
        pos = 0
        contents = self.contents
        prefixes = self.prefixes
        size = len(text)
        for m in self._first.finditer(text):
            at = m.start()
            if at < pos:
                continue
            end = 0
            k = at + 2
            while k <= size:
                head = text[at:k]
                if head not in prefixes:
                    break
                if head in contents:
                    end = k
                k += 1
            if end == 0 and text[at] in contents:  # a one-character spelling
                end = at + 1
            if end:
                if at > pos:
                    out.append((pos, at, False))
                out.append((at, end, True))
                pos = end
        if pos < size:
            out.append((pos, size, False))
        return out


def _isolate(pattern: Any, text: str) -> list[str]:
    """`text` split at `pattern`'s matches, keeping matches and the stretches between them (Isolated)."""
    out: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        start, end = m.span()
        if start > pos:
            out.append(text[pos:start])
        out.append(text[start:end])
        pos = end
    if pos < len(text):
        out.append(text[pos:])
    return out


_COUNTERS: weakref.WeakKeyDictionary[Any, IdCounter | None] = weakref.WeakKeyDictionary()


def id_counter(hf: Any) -> IdCounter | None:
    """The counter of a `tokenizers.Tokenizer`, once per tokenizer; None where its pipeline is not the proven one."""
    try:
        if hf in _COUNTERS:
            return _COUNTERS[hf]
    except TypeError:  # not weak-referenceable
        return None
    counter = IdCounter(hf) if _is_proven(hf) else None
    _COUNTERS[hf] = counter
    return counter


def _is_proven(hf: Any) -> bool:
    try:  # (the model is read by attribute: its state is the whole vocabulary, ~0.2 s to serialize)
        pre = json.loads(hf.pre_tokenizer.__getstate__())
        model = hf.model
        bpe = type(model).__name__ == "BPE" and model.dropout in (None, 0, 0.0)
        added = list(hf.get_added_tokens_decoder().values())
    except (AttributeError, TypeError, ValueError):
        return False
    normalizer = hf.normalizer
    return (
        unicodedata.unidata_version == _UNICODE
        and pre == _PROVEN_PRE_TOKENIZER
        and (normalizer is None or repr(normalizer) == "Sequence(normalizers=[])")
        and bpe
        and hf.truncation is None
        and hf.padding is None
        and not any(tok.lstrip or tok.rstrip or tok.single_word for tok in added)
    )
