"""The one interface over the grammar backends, and the matcher every caller uses.

A backend compiles (kind, source, vocabulary) into a `GrammarHandle`; a handle makes `BackendMatcher`s.
`CompiledConstraint` / `Matcher` wrap them with the behaviour that must not differ between backends:

* **EOS.** Backends never see the stop ids. `Matcher.fill_bitmask` sets the bits of
  `CompiledConstraint.eos_token_ids` exactly when `can_terminate()` is true (and clears them otherwise);
  `accept(eos)` succeeds exactly then and makes `is_terminated()` true. After termination the mask
  holds only the EOS ids. The engine therefore needs no EOS special case: sample from the mask.
* **Rejection.** `accept(t)` of a disallowed id returns False and leaves the state unchanged.
* **Rollback.** `rollback(n)` undoes the last n accepted ids (EOS included), for speculative decoding.
* **Budget.** A matcher with a `budget` (`CompiledConstraint.within_budget(max_tokens)`) closes the output
  before the budget runs out (`closing`): near the end, while the output cannot yet end, the mask holds only
  the next token of a path that ends it. Without a budget the masks are the grammar's alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from recipe.constraints import bitmask
from recipe.constraints.closing import CLOSING_HORIZON, BudgetCloser, closing_path
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.vocabulary import Vocabulary

if TYPE_CHECKING:
    from recipe.constraints.report import SchemaReport


class BackendMatcher(Protocol):
    def fill(self, out: np.ndarray) -> None:
        """Write the allowed-token bits (EOS bits are fixed up by the caller) into `out` (int32 words)."""

    def accept(self, token_id: int) -> bool:
        """Advance by a non-EOS id; False (state unchanged) when not allowed."""

    def rollback(self, n: int) -> None: ...

    def accepting(self) -> bool:
        """The text so far is a complete match."""


class GrammarHandle(Protocol):
    size_bytes: int

    def new_matcher(self) -> BackendMatcher: ...


class Backend(Protocol):
    name: str
    kinds: frozenset[str]

    def compile(self, kind: str, source: Any, vocab: Vocabulary, *, lenient: bool) -> GrammarHandle:
        """Compile; raise `ConstraintError` with the backend's message when it refuses."""


class _NothingMatcher:
    """Matcher of a constraint no text satisfies: allows no id, never terminates."""

    def fill(self, out: np.ndarray) -> None:
        out[:] = 0

    def accept(self, token_id: int) -> bool:
        return False

    def rollback(self, n: int) -> None:
        return None

    def accepting(self) -> bool:
        return False


class NothingHandle:
    size_bytes = 64

    def new_matcher(self) -> BackendMatcher:
        return _NothingMatcher()


@dataclass(frozen=True, eq=False)
class CompiledConstraint:
    """A constraint compiled for one vocabulary; immutable and shareable across requests and threads."""

    kind: str
    backend: str
    handle: GrammarHandle
    vocabulary: Vocabulary
    spec: Any = None
    report: SchemaReport | None = None
    schema: Any = None  # the JSON Schema outputs are validated against (json_schema kind)
    compile_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.vocabulary.vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.vocabulary.eos_token_ids

    @property
    def size_bytes(self) -> int:
        return int(self.handle.size_bytes)

    @property
    def budget(self) -> int | None:
        """Tokens (EOS included) each matcher closes the output within; None: no closing."""
        b = self.extra.get("budget")
        return None if b is None else int(b)

    def within_budget(self, max_tokens: int | None) -> CompiledConstraint:
        """The same constraint whose matchers close the output within `max_tokens` (None: never)."""
        self.extra.setdefault("closing_start", {})  # shared by the copies: the start path is searched once
        return dataclasses.replace(self, extra={**self.extra, "budget": max_tokens})

    def start_closing_length(self) -> int | None:
        """The closing path's length from the start state (`closing.closing_path`), searched once and kept."""
        memo = self.extra.setdefault("closing_start", {})
        if "length" not in memo:
            path = closing_path(Matcher(self))
            memo["length"] = None if path is None else len(path)
        return memo["length"]  # type: ignore[no-any-return]

    def matcher(self, *, reuse_string_masks: bool = True, reuse_format_masks: bool = True) -> Matcher:
        """A new per-request matcher. `reuse_string_masks=False` turns off the mask reuse inside JSON strings
        (`string_masks`, `format_masks`; same masks, each computed afresh); `reuse_format_masks=False` only the
        composed masks inside strings with a format or pattern (`format_masks`)."""
        return Matcher(self, reuse_string_masks=reuse_string_masks, reuse_format_masks=reuse_format_masks,
                       budget=self.budget)

    def allocate_bitmask(self, batch: int | None = None) -> np.ndarray:
        return bitmask.allocate(self.vocab_size, batch)

    def validate(self, text: str) -> list[str]:
        """Post-generation check of an output against the schema (json_schema/json_object kinds).

        Returns the error messages (empty = valid). Other kinds return [].
        """
        from recipe.constraints.report import validate_output

        if self.kind == "json_object":
            return validate_output({"type": "object"}, text)
        if self.kind != "json_schema":
            return []
        return validate_output(self.schema, text, self.extra.get("resources"))


class Matcher:
    """Per-request state over a `CompiledConstraint` (see the module docstring for the EOS contract)."""

    __slots__ = ("_closer", "_compiled", "_eos", "_eos_bits", "_eos_others", "_eos_probe", "_history", "_m", "_out",
                 "_out_u32", "_out_words", "_searching", "_terminated", "_words")

    # Read "not accepting" from the backend's own EOS bit where it has one (`eos_probe`), instead of asking
    # the backend after every fill; off: always ask (tests prove the masks equal).
    eos_from_mask: ClassVar[bool] = True

    def __init__(self, compiled: CompiledConstraint, *, reuse_string_masks: bool = True,
                 reuse_format_masks: bool = True, budget: int | None = None) -> None:
        self._compiled = compiled
        self._closer = (BudgetCloser(budget, compiled.start_closing_length() if budget > CLOSING_HORIZON else None)
                        if budget is not None else None)
        self._searching = False  # inside the closing search: masks are the grammar's, no bookkeeping
        self._m = compiled.handle.new_matcher()
        if reuse_string_masks and compiled.extra.get("track_strings"):
            from recipe.constraints.string_masks import StringTracker

            track = getattr(self._m, "track_strings", None)
            if track is not None:
                track(StringTracker(compiled.extra["string_schema"], compiled.vocabulary,
                                    formats=reuse_format_masks))
        self._eos = compiled.eos_token_ids
        self._history: list[int] = []
        self._terminated = False
        self._words = bitmask.words_for(compiled.vocab_size)
        self._eos_bits = tuple((e >> 5, 1 << (e & 31)) for e in self._eos)
        self._eos_probe: tuple[int, int] | None = getattr(self._m, "eos_probe", None) if self.eos_from_mask else None
        self._eos_others = tuple(b for b in self._eos_bits if b != self._eos_probe)  # to clear when the probe is
        # The last caller array, checked once: engines and benchmarks fill the same array every step,
        # and re-validating it (dtype, shape, views) cost more than an in-string llguidance mask.
        self._out: np.ndarray | None = None
        self._out_words: np.ndarray | None = None  # `_out` cut to exactly `_words` words
        self._out_u32: memoryview | None = None  # the same words as unsigned ints, for the EOS bits

    def _bind(self, out: np.ndarray) -> None:
        words = self._words
        if out.dtype != np.int32 or out.ndim != 1 or out.shape[0] < words:
            raise ConstraintError(f"bitmask must be a 1-D int32 array of at least {words} words")
        view = out[:words]
        self._out, self._out_words = out, view
        self._out_u32 = view.view(np.uint32).data if view.flags["C_CONTIGUOUS"] else None

    def fill_bitmask(self, out: np.ndarray) -> None:
        """Fill `out` (int32, at least ceil(V/32) words; extra words are zeroed) with the allowed ids."""
        if out is not self._out:
            self._bind(out)
        view = self._out_words
        assert view is not None
        if out.shape[0] > self._words:
            out[self._words :] = 0
        if self._terminated:
            view[:] = 0
            bitmask.set_allowed(view, self._eos)
            return
        if self.closing_due() and self._close(view):
            return
        self._m.fill(view)
        self._fix_eos(view, self._out_u32)

    def closing_due(self) -> bool:
        """The budget's end is near enough that `fill_bitmask` may force a closing path."""
        closer = self._closer
        return closer is not None and not self._searching and not self._terminated and closer.due(len(self._history))

    def _close(self, view: np.ndarray) -> bool:
        """Write the closing path's next token alone into `view` when the budget leaves no more room."""
        assert self._closer is not None
        self._searching = True
        try:
            token = self._closer.forced(self)
        finally:
            self._searching = False
        if token is None:
            return False
        view[:] = 0
        bitmask.set_allowed(view, (token,))
        return True

    def fill_grammar_mask(self, out: np.ndarray) -> None:
        """`fill_bitmask` without the budget's closing (the closing search walks the grammar with it)."""
        searching, self._searching = self._searching, True
        try:
            self.fill_bitmask(out)
        finally:
            self._searching = searching

    def fix_eos_bits(self, out: np.ndarray) -> None:
        """After the backend filled `out` (exactly ceil(V/32) words): EOS bits ⇔ can terminate."""
        if self._terminated:
            out[:] = 0
            bitmask.set_allowed(out, self._eos)
            return
        self._fix_eos(out, out.view(np.uint32).data if out.flags["C_CONTIGUOUS"] else None)

    def _fix_eos(self, out: np.ndarray, u32: memoryview | None) -> None:
        # scalar ops on a uint32 view: no loop over the vocabulary
        u: Any = u32 if u32 is not None else out.view(np.uint32)
        probe = self._eos_probe
        if probe is not None and not int(u[probe[0]]) & probe[1]:
            # the backend's EOS bit is clear: not accepting (`eos_probe`), and that bit needs no clearing
            for w, b in self._eos_others:
                u[w] = int(u[w]) & ~b & 0xFFFFFFFF
        elif self._m.accepting():
            for w, b in self._eos_bits:
                u[w] = int(u[w]) | b
        else:
            for w, b in self._eos_bits:
                u[w] = int(u[w]) & ~b & 0xFFFFFFFF

    def accept(self, token_id: int) -> bool:
        token_id = int(token_id)
        if self._terminated:
            return False
        if token_id in self._eos:
            if not self._m.accepting():
                return False
            self._terminated = True
            self._history.append(token_id)
            return True
        if not 0 <= token_id < self._compiled.vocab_size:
            return False
        if not self._m.accept(token_id):
            return False
        self._history.append(token_id)
        return True

    def accept_many(self, token_ids: list[int]) -> int:
        """Accept ids in order until one is refused; returns how many were accepted."""
        for n, t in enumerate(token_ids):
            if not self.accept(t):
                return n
        return len(token_ids)

    def rollback(self, n: int) -> None:
        if n < 0 or n > len(self._history):
            raise ConstraintError(f"cannot roll back {n} tokens; {len(self._history)} accepted")
        if n == 0:
            return
        drop = n
        if self._terminated:
            self._terminated = False
            drop -= 1
        if drop:
            self._m.rollback(drop)
        del self._history[len(self._history) - n :]
        if self._closer is not None and not self._searching:
            self._closer.rolled_back(len(self._history))

    def can_terminate(self) -> bool:
        return self._terminated or self._m.accepting()

    def is_terminated(self) -> bool:
        return self._terminated

    @property
    def backend_matcher(self) -> BackendMatcher:
        return self._m

    @property
    def vocabulary(self) -> Vocabulary:
        return self._compiled.vocabulary

    @property
    def accepted_ids(self) -> tuple[int, ...]:
        return tuple(self._history)

    @property
    def text(self) -> str:
        """The accepted prefix as text (EOS excluded; an incomplete UTF-8 tail shows as U+FFFD)."""
        v = self._compiled.vocabulary
        ids = self._history[:-1] if self._terminated else self._history
        return b"".join(v.piece(t) for t in ids).decode("utf-8", errors="replace")
