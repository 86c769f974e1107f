"""Rendered prompt → token ids (spec §3.2), with repeating text (templates, tool lists) encoded once.

Plain text between special ranges is encoded without the added vocabulary (so a user who types a
special-token spelling gets plain ids); each special range contributes the one id of its spelling.

Reuse of ids. A codec marks text that repeats across requests (`RenderedPrompt.reusable_spans`: tool
instructions, effort preambles, response-format sections, and the tool lists and response schemas that
clients resend with every turn). Its ids are looked up in a per-tokenizer cache (bounded; cleared whole
when full) instead of being re-encoded, but only between *safe cuts*: a special-range boundary, or a
position `p` with `prompt[p-1] == "\\n"` and `prompt[p]` not whitespace. For the DeepSeek pre-tokenizer
(digit and CJK isolating splits, then the GPT-style pattern, then byte-level BPE per pre-token) no
pre-token can span such a cut: a newline is never part of a letter, digit or CJK run, and the only
pre-tokens that contain a newline (`\\s*[\\r\\n]+`, ` ?[\\p{P}\\p{S}]+[\\r\\n]*`, `\\s+(?!\\S)`) extend
only over further whitespace. So the ids of the two sides concatenate to the one-pass ids. Where the
edge of a reusable span is not a safe cut, the span shrinks to its first/last internal safe cut and the
rest is encoded with its neighbours. `tests/codecs/test_encoding_*` check the rule on random texts and
the whole result against the reference encoder. Tokenizers whose pre-tokenizer is not that one get
no reuse (`_reuse_is_proven`).
"""

from __future__ import annotations

import json
import weakref
from typing import Any

from recipe.codecs.rendered import RenderedPrompt
from recipe.tokenizer import Tokenizer

ONE_CALL_PER_TEXT_BELOW_THRESHOLD = True  # off switch of `_encode_texts`'s one call per short text
_MAX_CACHED_CHARS = 1_000_000  # per tokenizer (~10 MB of ids); one text is cached only below 1/16 of it


class _IdCache:
    """Ids of reusable texts, bounded by total characters; cleared whole when full (hot texts refill at once)."""

    def __init__(self) -> None:
        self.ids: dict[str, list[int]] = {}
        self.chars = 0

    def put(self, text: str, ids: list[int]) -> None:
        if len(text) > _MAX_CACHED_CHARS // 16:
            return
        if self.chars + len(text) > _MAX_CACHED_CHARS:
            self.ids.clear()
            self.chars = 0
        self.ids[text] = ids
        self.chars += len(text)


_cuts: dict[str, tuple[int, int] | None] = {}
_caches: weakref.WeakKeyDictionary[Tokenizer, _IdCache] = weakref.WeakKeyDictionary()
_reuse_ok: weakref.WeakKeyDictionary[Tokenizer, bool] = weakref.WeakKeyDictionary()

# The pre-tokenizer the safe-cut argument above is made for (DeepSeek V3/V4 tokenizer.json).
_PROVEN_PRE_TOKENIZER: dict[str, Any] = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": False},
        {
            "type": "Split",
            "pattern": {
                "Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
                "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
            },
            "behavior": "Isolated",
            "invert": False,
        },
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}


def is_safe_cut(text: str, pos: int) -> bool:
    """Whether encoding `text[:pos]` and `text[pos:]` separately gives the ids of `text` (see module doc)."""
    return 0 < pos < len(text) and text[pos - 1] == "\n" and not text[pos].isspace()


def _reuse_is_proven(tokenizer: Tokenizer) -> bool:
    ok = _reuse_ok.get(tokenizer)
    if ok is None:
        spec = json.loads(tokenizer.plain.to_str())
        ok = spec.get("pre_tokenizer") == _PROVEN_PRE_TOKENIZER and not (spec.get("normalizer") or {}).get(
            "normalizers"
        )
        _reuse_ok[tokenizer] = ok
    return ok


def _internal_cuts(span: str) -> tuple[int, int] | None:
    """First and last safe cut strictly inside `span`, or `None` when it has none."""
    try:
        return _cuts[span]
    except KeyError:
        pass
    first = last = -1
    at = span.find("\n")
    while at >= 0:
        if is_safe_cut(span, at + 1):
            if first < 0:
                first = at + 1
            last = at + 1
        at = span.find("\n", at + 1)
    found = (first, last) if first > 0 else None
    if len(_cuts) >= 4096:
        _cuts.clear()
    _cuts[span] = found
    return found


def _cache_of(tokenizer: Tokenizer) -> _IdCache:
    cache = _caches.get(tokenizer)
    if cache is None:
        cache = _caches[tokenizer] = _IdCache()
    return cache


def clear_reuse_cache() -> None:
    """Forget every reused id (benchmarks use it to time cold requests)."""
    _caches.clear()
    _cuts.clear()


def _encode_texts(texts: list[str], tokenizer: Tokenizer) -> list[list[int]]:
    """Plain ids of every text: short ones in one offsets-free batch call, long ones through `encode_plain`.

    `encode_plain` splits long texts into parallel segments (`recipe.segments`); below its threshold it is
    one `tokenizers` pass, which `encode_batch_fast` equals (same pipeline, no offsets) at lower cost.
    Short texts that together stay below that threshold (every prompt but long ones) go one per call: a
    batch of several wakes the Rust thread pool, which costs more CPU than it saves at that size (the
    segment threshold is where parallel encoding starts to pay). `ONE_CALL_PER_TEXT_BELOW_THRESHOLD =
    False` is the off switch (one batch call, as before); same ids either way.
    """
    if not texts:
        return []
    threshold = getattr(getattr(tokenizer, "segments", None), "threshold_chars", 0)
    short = [t for t in texts if len(t) < threshold]
    batch = tokenizer.plain.encode_batch_fast
    fast = None
    if short and ONE_CALL_PER_TEXT_BELOW_THRESHOLD and sum(map(len, short)) < threshold:
        fast = iter(batch([t], add_special_tokens=False)[0].ids for t in short)
    elif short:
        fast = iter(e.ids for e in batch(short, add_special_tokens=False))
    if len(short) == len(texts):
        return list(fast) if fast is not None else []
    return [
        next(fast) if fast is not None and len(t) < threshold else tokenizer.encode_plain(t) for t in texts
    ]


def encode_rendered(rendered: RenderedPrompt, tokenizer: Tokenizer) -> list[int]:
    """Token ids of a rendered prompt.

    Raises `recipe.tokenizer.MissingSpecialTokenError` naming a special spelling the tokenizer lacks.
    """
    prompt = rendered.prompt
    reuse = bool(rendered.reusable_spans) and _reuse_is_proven(tokenizer)
    cache = _cache_of(tokenizer) if reuse else _IdCache()
    spans = rendered.reusable_spans if reuse else ()
    span_i, n_spans = 0, len(spans)

    # pieces: an int (special id), a list (cached ids) or a str (text to encode, in `pending` order).
    pieces: list[int | list[int] | str] = []
    pending: list[str] = []
    to_cache: list[int] = []  # indexes into `pending` of reusable texts not cached yet

    def plain(a: int, b: int) -> None:
        nonlocal span_i
        cur = a
        while span_i < n_spans and spans[span_i][0] < b:
            fs, fe = spans[span_i]
            span_i += 1
            if fe <= cur:
                continue
            fs = max(fs, cur)
            fe = min(fe, b)
            lo = fs if fs == a or is_safe_cut(prompt, fs) else -1
            hi = fe if fe == b or is_safe_cut(prompt, fe) else -1
            if lo < 0 or hi < 0:
                cuts = _internal_cuts(prompt[fs:fe])
                if cuts is None:
                    continue
                if lo < 0:
                    lo = fs + cuts[0]
                if hi < 0:
                    hi = fs + cuts[1]
                if lo >= hi:
                    continue
            if lo > cur:
                pending.append(prompt[cur:lo])
                pieces.append(pending[-1])
            key = prompt[lo:hi]
            ids = cache.ids.get(key)
            if ids is None:
                to_cache.append(len(pending))
                pending.append(key)
                pieces.append(key)
            else:
                pieces.append(ids)
            cur = hi
        if cur < b:
            pending.append(prompt[cur:b])
            pieces.append(pending[-1])

    pos = 0
    for start, end in rendered.special_ranges:
        if start > pos:
            plain(pos, start)
        pieces.append(tokenizer.special_id(prompt[start:end]))
        pos = end
    if pos < len(prompt):
        plain(pos, len(prompt))

    encoded_texts = _encode_texts(pending, tokenizer)
    for i in to_cache:
        cache.put(pending[i], encoded_texts[i])
    encoded = iter(encoded_texts)
    out: list[int] = []
    for piece in pieces:
        if type(piece) is int:
            out.append(piece)
        elif type(piece) is list:
            out.extend(piece)
        else:
            out.extend(next(encoded))
    return out


def encode_rendered_uncached(rendered: RenderedPrompt, tokenizer: Tokenizer) -> list[int]:
    """The plain algorithm of spec §3.2 without template reuse: the oracle for `encode_rendered`."""
    prompt = rendered.prompt
    out: list[int] = []
    pos = 0
    for start, end in rendered.special_ranges:
        out.extend(tokenizer.encode_plain_one_pass(prompt[pos:start]))
        out.append(tokenizer.special_id(prompt[start:end]))
        pos = end
    out.extend(tokenizer.encode_plain_one_pass(prompt[pos:]))
    return out
