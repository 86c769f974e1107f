"""llguidance backend: JSON Schema, regex, any-JSON-object, Lark grammars (also tool-call markup).

The tokenizer wrapper is built once per vocabulary (~0.6 s for 129k ids). llguidance treats every added
token as special, so JSON/regex masks never allow BOS/PAD/`<think>`/placeholders. A compiled grammar keeps
one warmed prototype matcher; each request gets a `deep_copy` of it (skips the lazy lexer build).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import llguidance as llg
import numpy as np

from recipe.constraints.format_masks import FormatMasks
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.string_masks import StringTracker
from recipe.constraints.vocabulary import Vocabulary

_ANY_OBJECT = {"type": "object"}
# Whitespace between JSON tokens: enough for pretty-printed output (newline + deep indentation), bounded so
# a model cannot loop on whitespace forever (unbounded whitespace is a known runaway-generation mode).
WHITESPACE = r"[ \t\n\r]{0,48}"


def ll_tokenizer(vocab: Vocabulary) -> llg.LLTokenizer:
    def build() -> llg.LLTokenizer:
        # llguidance reads non-special added tokens (`｜DSML｜`, `<dsml:`, …) as text and would allow them
        # inside JSON strings; marked special they are reachable only through `<[id]>` in a grammar.
        spec = json.loads(vocab.tokenizer_json)
        for t in spec.get("added_tokens") or []:
            t["special"] = True
        return llg.LLTokenizer(json.dumps(spec), n_vocab=vocab.vocab_size, eos_token=vocab.eos_token_ids[0])

    return vocab.backend_state("llguidance", build)  # type: ignore[no-any-return]


class _Matcher:
    """One request's llguidance matcher. Four shortcuts, all exact:

    * at the start state (nothing consumed, or everything rolled back) the mask is the one the prototype
      computed at compile time (llguidance is deterministic in its state), copied instead of recomputed;
    * inside a JSON string whose text is free (`string_masks`, when `track_strings` attached a tracker)
      the mask computed at the string's first such position is copied at the later ones;
    * inside a JSON string with a format or anchored pattern (`format_masks`, same tracker) the mask is
      composed from the inner part llguidance gave at the same DFA state before and what may follow the
      string (learned in this string, or one `validate_tokens` per unknown continuation);
    * the raw pointer of the last output array is kept (`ndarray.ctypes` costs microseconds per call).

    `eos_probe` (word, bit) is llguidance's own EOS id in a mask: llguidance sets it exactly when the matcher
    is accepting, or when it has stopped (then the mask is EOS alone). A clear bit therefore means "not
    accepting", which `Matcher` uses to skip asking (`Matcher.eos_from_mask`).
    """

    __slots__ = ("_consumed", "_formats", "_initial", "_m", "_nbytes", "_out", "_ptr", "_reuse_key", "_reuse_mask",
                 "_strings", "eos_probe")

    def __init__(self, m: llg.LLMatcher, initial: np.ndarray | None, eos_id: int | None = None) -> None:
        self._m = m
        self._initial = initial
        self.eos_probe = (eos_id >> 5, 1 << (eos_id & 31)) if eos_id is not None else None
        self._consumed = 0
        self._out: np.ndarray | None = None
        self._ptr = 0
        self._nbytes = 0
        self._strings: StringTracker | None = None
        self._reuse_key: tuple[int, int] | None = None
        self._reuse_mask: np.ndarray | None = None
        self._formats = FormatMasks()

    def track_strings(self, tracker: StringTracker) -> None:
        """Reuse masks inside free JSON strings, at the positions `tracker` marks (before any id is accepted)."""
        self._strings = tracker

    def fill(self, out: np.ndarray) -> None:
        if self._consumed == 0 and self._initial is not None and out.shape == self._initial.shape:
            np.copyto(out, self._initial)
            return
        strings = self._strings
        if strings is not None:
            key = strings.key
            if key is not None and key == self._reuse_key:
                assert self._reuse_mask is not None
                if out.shape == self._reuse_mask.shape:
                    np.copyto(out, self._reuse_mask)
                    return
            fkey = strings.format_key
            if fkey is not None and self._formats.fill(fkey, out, self._m):
                return
        if out is not self._out:
            if not out.flags["C_CONTIGUOUS"]:
                raise ConstraintError("llguidance masks need a C-contiguous int32 array")
            self._out, self._ptr, self._nbytes = out, out.ctypes.data, out.nbytes
        self._m.unsafe_compute_mask_ptr(self._ptr, self._nbytes)
        if strings is not None:
            self.remember(out)

    def remember(self, out: np.ndarray) -> None:
        """Keep what `out`, just computed by llguidance for this state, tells the reuse at the tracker's marks."""
        if self._strings is None:
            return
        fkey = self._strings.format_key
        if fkey is not None:
            self._formats.learn(fkey, out)
        key = self._strings.key
        if key is None or key == self._reuse_key:
            return
        if self._reuse_mask is None or self._reuse_mask.shape != out.shape:
            self._reuse_mask = np.empty_like(out)
        np.copyto(self._reuse_mask, out)
        self._reuse_key = key

    @property
    def copies_mask(self) -> bool:
        """`fill` copies a kept mask instead of asking llguidance (the batch path fills these one by one)."""
        if self.at_start:
            return True
        strings = self._strings
        if strings is None:
            return False
        if strings.key is not None and strings.key == self._reuse_key:
            return True
        return strings.format_key is not None and self._formats.ready(strings.format_key)

    def accept(self, token_id: int) -> bool:
        if self._m.try_consume_tokens([token_id]) == 1:
            self._consumed += 1
            if self._strings is not None:
                self._strings.advance(token_id)
            return True
        return False

    def rollback(self, n: int) -> None:
        if not self._m.rollback(n):
            raise ConstraintError(f"llguidance refused to roll back {n} tokens: {self._m.get_error()}")
        self._consumed -= n
        if self._strings is not None:
            self._strings.rollback(n)
            self._reuse_key = None
            self._formats.forget()

    def accepting(self) -> bool:
        return bool(self._m.is_accepting())

    @property
    def raw(self) -> llg.LLMatcher:
        return self._m

    @property
    def at_start(self) -> bool:
        return self._consumed == 0 and self._initial is not None


class _Handle:
    def __init__(self, grammar: str, proto: llg.LLMatcher, initial: np.ndarray, eos_id: int) -> None:
        self.grammar = grammar
        self._proto = proto
        self._eos_id = eos_id  # the tokenizer's EOS as llguidance knows it (`ll_tokenizer`)
        self._initial = initial
        self._initial.flags.writeable = False
        self._lock = threading.Lock()  # one clone at a time: requests on many threads share the prototype
        # grammar text plus the warmed prototype's lexer/parser state: measured ~113 KiB RSS per compiled
        # bench schema (600 kept), so the estimate errs high; plus the start mask
        self.size_bytes = 2 * len(grammar) + 128 * 1024 + initial.nbytes

    def new_matcher(self) -> _Matcher:
        with self._lock:
            return _Matcher(self._proto.deep_copy(), self._initial, self._eos_id)


def grammar_text(kind: str, source: Any, *, lenient: bool) -> str:
    """The llguidance grammar (JSON-serialised) for a kind; raises `ConstraintError` on bad input."""
    overrides: dict[str, Any] = {"whitespace_pattern": WHITESPACE}
    if lenient:
        overrides["lenient"] = True
    try:
        if kind == "json_schema":
            if source is True:
                source = {}  # llguidance applies its options to object schemas only
            return llg.LLMatcher.grammar_from_json_schema(json.dumps(source), overrides=overrides)  # type: ignore[arg-type]
        if kind == "json_object":
            return llg.LLMatcher.grammar_from_json_schema(json.dumps(_ANY_OBJECT), overrides=overrides)  # type: ignore[arg-type]
        if kind == "regex":
            return llg.LLMatcher.grammar_from_regex(str(source))
        if kind in ("grammar", "tool_call"):
            return llg.LLMatcher.grammar_from_lark(str(source))
    except ValueError as exc:
        raise ConstraintError(f"llguidance: {exc}") from None
    raise ConstraintError(f"llguidance does not support constraint kind {kind!r}")


class LLGuidanceBackend:
    name = "llguidance"
    kinds = frozenset({"json_schema", "json_object", "regex", "grammar", "tool_call"})

    def compile(self, kind: str, source: Any, vocab: Vocabulary, *, lenient: bool) -> _Handle:
        grammar = grammar_text(kind, source, lenient=lenient)
        tok = ll_tokenizer(vocab)
        proto = llg.LLMatcher(tok, grammar, log_level=0)
        if proto.is_error():
            raise ConstraintError(f"llguidance: {_clean(proto.get_error())}")
        initial = np.zeros((vocab.vocab_size + 31) // 32, dtype=np.int32)
        proto.unsafe_compute_mask_ptr(initial.ctypes.data, initial.nbytes)
        if proto.is_error():
            raise ConstraintError(f"llguidance: {_clean(proto.get_error())}")
        return _Handle(grammar, proto, initial, vocab.eos_token_ids[0])


def _clean(msg: str) -> str:
    return " ".join(msg.split())[:2000]
