"""Parallel segment encoding of long plain text, with ids identical to one-pass encoding.

A byte-level BPE tokenizer encodes a text as: pre-tokenize (a sequence of isolating regex splits),
then run BPE on every pre-token independently. Cutting the text at a position `p` and encoding the two
halves separately therefore gives the one-pass ids exactly when the pre-tokens of the whole text are
the pre-tokens of `text[:p]` followed by those of `text[p:]`. This module only cuts where that is
*provable from the two characters around the cut* for the pre-tokenizer family at hand (see the
rule tables below for the argument); where no such point exists near the target size the segment
simply grows until the next one, so a region without a safe cut (a long CJK run, a whitespace run, one
huge word) is encoded in one piece, exactly as the one-pass encoder would. Never a different id.

Re-encoding a window around an unsafe seam and splicing where two encodings agree is deliberately not
used: the regions without a provable cut are single pre-tokens (or characters whose class Python's
Unicode tables cannot vouch for), and inside one pre-token BPE merges have no bounded reach, so
agreement inside a window proves nothing about the whole. Those regions fall back to one pass instead.

Pre-tokenizers that are not recognised get no cut rule: their texts are encoded in one pass.
"""

from __future__ import annotations

import enum
import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tokenizers import Tokenizer as HFTokenizer

# Below this many characters a text is encoded in one pass; above it, in segments of about
# DEFAULT_SEGMENT_CHARS characters. Both figures come from bench/encode_long.py (see its docstring).
DEFAULT_THRESHOLD_CHARS = 16_384
DEFAULT_SEGMENT_CHARS = 8_192

_DIGITS = "0123456789"
_MAX_REJECTED_RUNS = 256
_SURROGATE = re.compile("[\ud800-\udfff]")


class CharClass(enum.IntEnum):
    """What the pre-tokenizer regexes are certain to see in one character.

    Non-ASCII characters are classified with Python's Unicode tables; a character they do not know
    (unassigned there, or private use) is OTHER, and OTHER never makes a cut safe on its own side
    unless the rule does not depend on it (the CJK-run boundary).
    """

    OTHER = 0
    DIGIT = 1  # ASCII 0-9 (\p{N})
    LETTER = 2  # \p{L} or \p{M}, not in the CJK ranges
    PUNCT = 3  # \p{P} or \p{S}
    NEWLINE = 4  # \r or \n
    SPACE = 5  # space or tab (\s, not [\r\n])
    CJK = 6  # [一-龥぀-ゟ゠-ヿ]: U+4E00-U+9FA5, U+3040-U+30FF


def _ascii_classes() -> list[CharClass]:
    table = [CharClass.OTHER] * 128
    for o in range(128):
        ch = chr(o)
        if ch in _DIGITS:
            table[o] = CharClass.DIGIT
        elif ch.isalpha():
            table[o] = CharClass.LETTER
        elif 0x21 <= o <= 0x7E:
            table[o] = CharClass.PUNCT  # every printable non-alphanumeric ASCII character is P or S
        elif ch in "\r\n":
            table[o] = CharClass.NEWLINE
        elif ch in " \t":
            table[o] = CharClass.SPACE
    return table


_ASCII_CLASSES = _ascii_classes()
_CLASS_CACHE: dict[str, CharClass] = {}


def char_class(ch: str) -> CharClass:
    """The class of one character (see `CharClass`)."""
    o = ord(ch)
    if o < 128:
        return _ASCII_CLASSES[o]
    cached = _CLASS_CACHE.get(ch)
    if cached is not None:
        return cached
    if 0x4E00 <= o <= 0x9FA5 or 0x3040 <= o <= 0x30FF:
        cls = CharClass.CJK
    else:
        major = unicodedata.category(ch)[0]
        cls = CharClass.LETTER if major in "LM" else CharClass.PUNCT if major in "PS" else CharClass.OTHER
    if len(_CLASS_CACHE) < 65_536:
        _CLASS_CACHE[ch] = cls
    return cls


def _pair_table(safe: set[tuple[CharClass, CharClass]]) -> tuple[tuple[bool, ...], ...]:
    return tuple(tuple((a, b) in safe for b in CharClass) for a in CharClass)


class CutRule(Protocol):
    """Where a pre-tokenizer family provably cannot merge across a cut."""

    @property
    def name(self) -> str: ...

    def is_safe(self, text: str, pos: int) -> bool:
        """True when cutting `text` at `pos` (0 < pos < len) keeps every pre-token whole."""
        ...

    def find_cut(self, text: str, start: int, origin: int) -> int | None:
        """The first safe cut at or after `start` (origin = the previous cut, <= start), or None."""
        ...


@dataclass(frozen=True)
class _PairRule:
    """A rule decided by the classes of the two characters around the cut, plus a run regex.

    Every safe pair joins two different classes, so safe cuts lie at the ends of runs of one class:
    the regex (matched in C) steps from run to run, and each run end is confirmed with the class table.
    A run the regex draws wider than one class only hides cuts, never adds one.
    """

    name: str
    table: tuple[tuple[bool, ...], ...]
    runs: re.Pattern[str]

    def pair_safe(self, text: str, pos: int) -> bool:
        return self.table[char_class(text[pos - 1])][char_class(text[pos])]

    def is_safe(self, text: str, pos: int) -> bool:
        return 0 < pos < len(text) and self.pair_safe(text, pos)

    def find_cut(self, text: str, start: int, origin: int) -> int | None:
        n = len(text)
        start = pos = max(start, 1)
        table = self.table
        while pos < n:
            if self.pair_safe(text, pos):
                return pos
            for rejected, m in enumerate(self.runs.finditer(text, pos), 1):
                end = m.end()
                if end >= n:
                    return None
                if table[char_class(text[end - 1])][char_class(text[end])]:
                    return end
                if rejected == _MAX_REJECTED_RUNS:
                    break
            else:
                return None
            # Many short runs and no safe cut (e.g. "٣ ٣ ٣ ..."): skip ahead as far again as already
            # searched. Any later safe cut is as correct; this bounds the Python work per character.
            pos = end + (end - start)
        return None


_CJK = "一-龥぀-ゟ゠-ヿ"

_C = CharClass
# DeepSeek V3/V4 pre-tokenizer: Split(\p{N}{1,3}) ▸ Split([一-龥぀-ゟ゠-ヿ]+) ▸ Split(GPT-style regex
#   [P][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ' '?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+)
# ▸ ByteLevel, all Isolated. Let a = text[p-1], b = text[p].
# * Exactly one of a, b is a digit: p is a boundary of the first split in the whole text and in both
#   halves (digit groups are counted from the start of each run, which the cut does not move); the
#   later splits work inside those pieces, so nothing can merge across p.
# * Exactly one of a, b is CJK: the CJK side is never \p{N}, so p is a boundary of split 1 (if the other
#   side is a digit) or of split 2 (otherwise).
# * Otherwise p lies inside one piece and the third regex decides. Going through its alternatives, the
#   only adjacent class pairs one match can span are (P, ASCII letter), (letter, letter), (X, L/M) for a
#   prefix X that is neither \r\n, L, P nor S (space, tab, mark, other), (mark, L/M), (space, P),
#   (P, P), (P, \r\n), (\r\n, \r\n) and (whitespace, whitespace). The accepted pairs below are none of
#   those, and b is never an unmatched character, so a match starts at p in the whole text and in the
#   right half alike (the regex has no look-behind). The left half differs from the whole only in what
#   is read at p (end of text instead of b): consuming b cannot lead to a match (it would span p), and
#   the only look-ahead, `\s+(?!\S)`, reads p only when a is whitespace, i.e. the (\r\n, non-space)
#   pairs, where `\s*[\r\n]+` comes first and matches the same run in both texts.
_DEEPSEEK_SAFE = {
    (_C.LETTER, _C.PUNCT),
    (_C.LETTER, _C.SPACE),
    (_C.PUNCT, _C.SPACE),
    (_C.LETTER, _C.NEWLINE),
    (_C.NEWLINE, _C.LETTER),
    (_C.NEWLINE, _C.PUNCT),
}
_DEEPSEEK_SAFE |= {(x, _C.CJK) for x in _C if x != _C.CJK} | {(_C.CJK, x) for x in _C if x != _C.CJK}
_SURELY_NOT_N = (_C.LETTER, _C.PUNCT, _C.NEWLINE, _C.SPACE, _C.CJK)
_DEEPSEEK_SAFE |= {(_C.DIGIT, x) for x in _SURELY_NOT_N} | {(x, _C.DIGIT) for x in _SURELY_NOT_N}

# Runs: CJK, ASCII digits, whitespace, non-CJK letters, punctuation/symbols/marks, or one other character.
_DEEPSEEK_RUNS = re.compile(rf"[{_CJK}]+|[0-9]+|\s+|[^\W\d_{_CJK}]+|[^\w\s]+|.", re.DOTALL)


@dataclass(frozen=True)
class DeepSeekCutRule(_PairRule):
    """Cut rule of the DeepSeek V3/V4 pre-tokenizer, plus cuts inside long ASCII digit runs.

    `\\p{N}{1,3}` groups a digit run in threes from its first digit, so a cut inside a run is safe at a
    multiple of three from the run's start, when the character before the run is known not to be \\p{N}.
    """

    def is_safe(self, text: str, pos: int) -> bool:
        if not 0 < pos < len(text):
            return False
        if text[pos - 1] in _DIGITS and text[pos] in _DIGITS:
            start = _digit_run_start(text, pos, 0)
            return start is not None and (pos - start) % 3 == 0
        return self.pair_safe(text, pos)

    def find_cut(self, text: str, start: int, origin: int) -> int | None:
        pos = max(start, 1)
        if pos < len(text) and text[pos - 1] in _DIGITS and text[pos] in _DIGITS:
            run_start = _digit_run_start(text, pos, origin)
            if run_start is not None:
                cut = pos + (-(pos - run_start)) % 3
                if cut < len(text) and all(c in _DIGITS for c in text[pos : cut + 1]):
                    return cut
        return _PairRule.find_cut(self, text, pos, origin)


def _digit_run_start(text: str, pos: int, origin: int) -> int | None:
    """Where the ASCII digit run ending at `pos` starts its groups of three, or None when unknown.

    `origin` is a position known to start a group (0 or an earlier safe cut): the search stops there.
    """
    before = text[origin:pos]
    start = pos - (len(before) - len(before.rstrip(_DIGITS)))
    if start == origin or char_class(text[start - 1]) in _SURELY_NOT_N:
        return start
    return None


# GPT-2 byte-level pre-tokenizer ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+),
# optionally after a Digits split. No alternative puts a non-space character before a space in one match,
# whitespace is always matched, and the look-ahead reads p only after whitespace; so a cut between a
# character that is surely not whitespace and a space, tab, \r or \n is safe (a Digits split before it
# only adds boundaries).
_GPT2_SAFE = {(a, b) for a in (_C.LETTER, _C.PUNCT, _C.DIGIT, _C.CJK) for b in (_C.SPACE, _C.NEWLINE)}
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

DEEPSEEK_RULE = DeepSeekCutRule("deepseek", _pair_table(_DEEPSEEK_SAFE), _DEEPSEEK_RUNS)
GPT2_RULE = _PairRule("gpt2-byte-level", _pair_table(_GPT2_SAFE), re.compile(r"\S+|\s+"))

_DEEPSEEK_SPLITS = (
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    # tokenizer.json spells \r and \n inside this pattern as the characters themselves
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^<CRLF>\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
    r"| ?[\p{P}\p{S}]+[<CRLF>]*|\s*[<CRLF>]+|\s+(?!\S)|\s+".replace("<CRLF>", "\r\n"),
)


def _is_split(step: dict[str, Any], pattern: str) -> bool:
    return (
        step.get("type") == "Split"
        and step.get("pattern") == {"Regex": pattern}
        and step.get("behavior") == "Isolated"
        and not step.get("invert", False)
    )


def _is_byte_level(step: dict[str, Any], use_regex: bool) -> bool:
    return (
        step.get("type") == "ByteLevel"
        and not step.get("add_prefix_space", False)
        and bool(step.get("use_regex", True)) is use_regex
    )


def cut_rule_for(spec: dict[str, Any]) -> CutRule | None:
    """The cut rule of a parsed `tokenizer.json`, or None when cuts cannot be proven safe for it.

    Requires a BPE model without dropout, no normalizer, no truncation or padding, and a recognised
    pre-tokenizer (DeepSeek V3/V4, or GPT-2 byte-level with optional digit splitting).
    """
    model = spec.get("model") or {}
    normalizer = spec.get("normalizer")
    if model.get("type") != "BPE" or model.get("dropout") not in (None, 0, 0.0):
        return None
    if normalizer is not None and normalizer != {"type": "Sequence", "normalizers": []}:
        return None
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        return None
    pre = spec.get("pre_tokenizer") or {}
    steps: list[dict[str, Any]] = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if (
        len(steps) == 4
        and all(_is_split(s, p) for s, p in zip(steps, _DEEPSEEK_SPLITS, strict=False))
        and _is_byte_level(steps[3], use_regex=False)
    ):
        return DEEPSEEK_RULE
    if steps and _is_byte_level(steps[-1], use_regex=True) and all(s.get("type") == "Digits" for s in steps[:-1]):
        return GPT2_RULE
    if (
        len(steps) == 2
        and _is_split(steps[0], _GPT2_PATTERN)
        and _is_byte_level(steps[1], use_regex=False)
    ):
        return GPT2_RULE
    return None


def plan_cuts(text: str, rule: CutRule, segment_chars: int) -> list[int]:
    """Segment bounds `[0, c1, ..., len(text)]`: each cut is the first safe one >= previous + segment_chars."""
    if segment_chars < 1:
        raise ValueError(f"segment_chars must be at least 1, got {segment_chars}")
    bounds = [0]
    n = len(text)
    prev = 0
    while prev + segment_chars < n:
        cut = rule.find_cut(text, prev + segment_chars, prev)
        if cut is None:
            break
        assert prev < cut < n
        bounds.append(cut)
        prev = cut
    bounds.append(n)
    return bounds


class SegmentEncoder:
    """`encode(text)` = one-pass plain encoding of `text`, run on all cores for long texts.

    `plain` must have no added vocabulary (an added-token spelling could span a cut); `rule` comes from
    `cut_rule_for` on the same `tokenizer.json`.

    Texts shorter than `threshold_chars`, and every text of a tokenizer without a cut rule, are encoded
    in one pass. Longer ones are cut by `plan_cuts` and the segments encoded with the `tokenizers`
    batch API (Rust threads, no GIL; `RAYON_NUM_THREADS` bounds them). Both go through
    `encode_batch_fast`, which skips offset bookkeeping: same ids as `encode`, measured faster at every
    size from 5 characters up.
    """

    def __init__(
        self,
        plain: HFTokenizer,
        rule: CutRule | None,
        *,
        threshold_chars: int = DEFAULT_THRESHOLD_CHARS,
        segment_chars: int = DEFAULT_SEGMENT_CHARS,
    ) -> None:
        self.plain = plain
        self.rule = rule
        self.threshold_chars = threshold_chars
        self.segment_chars = segment_chars
        fast = getattr(plain, "encode_batch_fast", None)  # tokenizers >= 0.20: no offset bookkeeping
        self._encode_batch = fast if fast is not None else plain.encode_batch

    def bounds(self, text: str, *, segment_chars: int | None = None, threshold_chars: int | None = None) -> list[int]:
        """Segment bounds this encoder uses for `text` (`[0, len]` when it is encoded in one pass)."""
        threshold = self.threshold_chars if threshold_chars is None else threshold_chars
        if self.rule is None or len(text) < threshold:
            return [0, len(text)]
        return plan_cuts(text, self.rule, segment_chars or self.segment_chars)

    def encode(self, text: str, *, segment_chars: int | None = None, threshold_chars: int | None = None) -> list[int]:
        """Ids of `text` as plain text; `segment_chars`/`threshold_chars` override the defaults (tests)."""
        if not text:
            return []
        return self.encode_batch([text], segment_chars=segment_chars, threshold_chars=threshold_chars)[0]

    def encode_batch(
        self, texts: Sequence[str], *, segment_chars: int | None = None, threshold_chars: int | None = None
    ) -> list[list[int]]:
        """`encode` of every text, all segments of all texts in one parallel batch."""
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"text to encode must be str, not {type(t).__name__}")
        plans = [self.bounds(t, segment_chars=segment_chars, threshold_chars=threshold_chars) for t in texts]
        pieces = [t[a:b] for t, bounds in zip(texts, plans, strict=True) for a, b in itertools.pairwise(bounds)]
        try:
            encodings = self._encode_batch(pieces, add_special_tokens=False) if pieces else []
        except TypeError:
            for t in texts:
                bad = _SURROGATE.search(t)
                if bad is not None:
                    raise ValueError(
                        f"text is not valid Unicode: lone surrogate U+{ord(bad.group()):04X} at character {bad.start()}"
                    ) from None
            raise
        out: list[list[int]] = []
        i = 0
        for bounds in plans:
            count = len(bounds) - 1
            if count == 1:
                out.append(encodings[i].ids)
            else:
                ids: list[int] = []
                for enc in encodings[i : i + count]:
                    ids.extend(enc.ids)
                out.append(ids)
            i += count
        return out
