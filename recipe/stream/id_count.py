"""How many ids a text encodes to, with the DeepSeek V3/V4 pre-tokenizer run in Python (the reasoning-token count).

`count_ids` (recipe.stream.usage) is `len(tokenizer.full.encode(text, add_special_tokens=False).ids)`, paid
once at the end of every thinking stream. For the DeepSeek V3/V4 `tokenizer.json` that pipeline is: added
tokens split out; Split(\\p{N}{1,3}) ▸ Split(CJK runs) ▸ Split(GPT-style pattern), each Isolated (every
match and every stretch between matches is a piece, and each split works inside the previous one's
pieces); ByteLevel without regex (bytes to characters); BPE per piece. The three Oniguruma splits are
~90% of that call (~20 µs for a 75-character text in a loop, ~45 µs at a stream's end where its tables
are out of cache). `IdCounter` runs the same splits in Python and counts each piece's BPE ids with the
tokenizer's own model once (cached per piece, bounded), so the sum is the tokenizer's count:

* added tokens first, as the tokenizer splits them (leftmost-longest; the raw-matched ones, then the
  normalized ones in what is left, the same text here since there is no normalizer), one id each;
* text without CJK: the splits run with stdlib `re` over a string of the characters' classes (see
  `_CLASS_WORDS`; classes from `unicodedata`, tabled once per character seen);
* text with CJK: the tokenizer's own patterns, read by `regex`.

A text holding a character unassigned in Unicode 14.0 goes to the tokenizer: Oniguruma and the newer
Unicode of `regex` classify exactly those characters differently (every code point compared, in
several contexts, for the installed versions), and `unicodedata` 14.0.0 (Python 3.11) does not know
them; characters assigned by then keep their classes, so later versions only add characters this rule
already sends to the tokenizer. With another `unicodedata` there is no counter.

`id_counter(hf)` gives a counter only for a tokenizer whose pre-tokenizer is exactly `recipe.encoding`'s
proven one, without normalizer, truncation or padding, with a BPE model without dropout and added tokens
that strip nothing and match anywhere; else None (the caller encodes). `IdCounter.enabled = False` is the
off switch. Proven equal: tests/stream/test_usage_count.py (code points in several contexts against the
tokenizer's pieces: all below U+0800 and every 97th on every run, all of them under `-m slow`; drawn texts
against `encode`).
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
import weakref
from typing import Any, ClassVar

import regex

from recipe.detokenizer import byte_level_alphabet
from recipe.encoding import _PROVEN_PRE_TOKENIZER

_MAX_PIECES = 1 << 15  # cached pieces per tokenizer (cleared whole when full)
_MAX_PIECE_CHARS = 64  # longer pieces are counted but not cached


# text with CJK (or characters not tabled): the tokenizer's three split patterns, read by `regex`
_SPLITS = [
    regex.compile(step["pattern"]["Regex"]) for step in _PROVEN_PRE_TOKENIZER["pretokenizers"] if step["type"] == "Split"
]
# Text without CJK is split as a string of character classes with stdlib `re` (~3x faster than `regex`'s
# per-character property lookups): ASCII characters stand for themselves, every other character for one
# of its class (the splits read no more of a character than its class): White_Space -> \x0b, \p{N} -> 0,
# \p{L} -> Ā, \p{M} -> U+0300, \p{P} or \p{S} -> ¡, anything else -> \x01. On that alphabet \p{N} is 0-9,
# \p{L} A-Za-zĀ, \p{M} U+0300, \p{P}/\p{S} the 32 ASCII punctuation characters and ¡, \s the six below.
_PUNCT = re.escape(string.punctuation)
_WS = "\t\n\x0b\x0c\r "
_CLASS_DIGIT_PIECES = re.compile("[0-9]{1,3}|[^0-9]+")
_CLASS_DIGIT = re.compile("[0-9]")
_CLASS_WORDS = re.compile(
    f"[{_PUNCT}][A-Za-z]+|[^\r\nA-Za-z\u0100{_PUNCT}\u00a1]?[A-Za-z\u0100\u0300]+| ?[{_PUNCT}\u00a1]+[\r\n]*"
    f"|[{_WS}]*[\r\n]+|[{_WS}]+(?![^{_WS}])|[{_WS}]+"
)
# the third split's pieces in one `findall`: a match, or else a run of characters at none of which it
# matches (the stretch between two matches, which the tokenizer keeps as one piece)
_CLASS_PIECES = re.compile(f"{_CLASS_WORDS.pattern}|(?:(?!{_CLASS_WORDS.pattern})[\\s\\S])+")
_CJK = re.compile("[一-龥぀-ゟ゠-ヿ]")
_WHITE_SPACE = frozenset("\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B))))


def _class_char(char: str, category: str) -> int:
    """The class character a non-ASCII character stands as (see above)."""
    if char in _WHITE_SPACE:
        return 0x0B
    kind = category[0]
    if kind == "N":
        return 0x30
    if kind == "L":
        return 0x100
    if kind == "M":
        return 0x300
    if kind in ("P", "S"):
        return 0xA1
    return 0x01


_UNICODE = "14.0.0"  # the version whose unassigned characters go to the tokenizer (see the module docstring)


class IdCounter:
    """Counts ids of texts for one tokenizer (see the module docstring)."""

    enabled: ClassVar[bool] = True

    def __init__(self, hf: Any) -> None:
        self._model = hf.model
        self._counts: dict[str, int] = {}
        # ByteLevel: a piece's UTF-8 bytes, read as Latin-1, then each byte to its character
        self._bytes = {byte: ord(char) for char, byte in byte_level_alphabet().items()}
        # characters known to be assigned in Unicode `_UNICODE`, and their class characters (grow as texts
        # show new ones, up to a bound)
        self._assigned: set[str] = set()
        self._classes: dict[int, int] = {}
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
        tabled = True
        if not text.isascii():
            fresh = set(text) - self._assigned
            if fresh:
                category = unicodedata.category
                for char in fresh:
                    if category(char) in ("Cn", "Cs"):  # surrogates: not text (encode raises)
                        return None
                if len(self._assigned) < _MAX_PIECES:
                    self._assigned |= fresh
                    for char in fresh:
                        if not char.isascii():
                            self._classes[ord(char)] = _class_char(char, category(char))
                else:
                    tabled = False
        counts = self._counts
        total = 0
        if self._added_first.search(text) is None:
            for word in self._words(text, tabled):
                n = counts.get(word)
                total += n if n is not None else self._piece(word)
            return total
        for start, end, added in self._raw.split(text):
            if added:
                total += 1
                continue
            for start2, end2, added2 in self._normalized.split(text[start:end]):
                if added2:
                    total += 1
                    continue
                for word in self._words(text[start + start2 : start + end2], tabled):
                    n = counts.get(word)
                    total += n if n is not None else self._piece(word)
        return total

    def pieces(self, text: str) -> list[str]:
        """The pre-tokens `count` sums over (before ByteLevel) of text without added tokens: for the tests."""
        return self._words(text, all(c in self._assigned or c.isascii() for c in text))

    def _words(self, text: str, tabled: bool) -> list[str]:
        """The pre-tokens of text without added tokens (`tabled`: its characters' classes are known)."""
        if text.isascii():
            classes = text
        elif tabled and _CJK.search(text) is None:
            classes = text.translate(self._classes)
        else:
            return self._words_unicode(text)
        if _CLASS_DIGIT.search(classes) is None:
            return _class_words(text, classes)
        out: list[str] = []
        pos = 0
        for piece in _CLASS_DIGIT_PIECES.findall(classes):
            end = pos + len(piece)
            out += _class_words(text[pos:end], piece)
            pos = end
        return out

    def _words_unicode(self, text: str) -> list[str]:
        """`_words` with `regex`'s Unicode classes (text with CJK, or characters not tabled)."""
        out: list[str] = []
        for piece in _isolate(_SPLITS[0], text):
            for part in _isolate(_SPLITS[1], piece):
                out += _isolate(_SPLITS[2], part)
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


def _class_words(text: str, classes: str) -> list[str]:
    """The third split's pieces of `text`, found in its class string `classes` (same length)."""
    found = _CLASS_PIECES.findall(classes)
    if classes is text:
        return found
    out: list[str] = []
    pos = 0
    for word in found:
        end = pos + len(word)
        out.append(text[pos:end])
        pos = end
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
