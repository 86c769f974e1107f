"""Closing a constrained output within its token budget.

A constrained output cut by `max_tokens` breaks the format it was asked for: a forced tool call without its
close has no call at all, a JSON answer does not parse. `closing_path(matcher)` finds, from the
matcher's current state, a short token path that ends the output (the EOS id included). A `Matcher` with a
budget (`CompiledConstraint.within_budget`) asks its `BudgetCloser` before each mask: inside the last
`CLOSING_HORIZON` tokens it looks for a path every `CHECKPOINT_STRIDE` tokens, and from the first checkpoint
whose path leaves no more than `CLOSING_MARGIN` + `CHECKPOINT_STRIDE` tokens of room, the mask holds only the
path's next token. The output then ends complete and inside the mask: strings are cut short, optional parts
left out, never a token the mask forbids. While the output may already end, nothing is forced. What is not
guaranteed: a path longer than the horizon, or one that the tokens sampled in a stride lengthen by more than
the margin (a small model rambling inside a string does not), ends cut as before.

The search is a depth-first walk through the mask with backtracking. At each state it scores a few
candidates (pieces made only of `"`, `}` and `]`; added tokens such as the DSML marker or `</think>`;
structural pieces such as `</`, `>`, `,`; short values such as `0` or `null`; the longest allowed pieces,
which is how literal text a grammar forces is found) by what they leave: a state that may end first, then
fewer allowed tokens next (one added token of lookahead, since `</` opens nothing until the marker after it
closes a parameter); at a choice inside structure (which key, which parameter: few tokens allowed) it tries
first the option whose greedy rollout ends soonest, which leaves optional keys out. It is a heuristic, not a shortest path: the path is valid by construction (the matcher
accepted every token) but may be longer than the shortest, and the search gives up after `MAX_NODES` states.

The forced token is a function of the accepted ids alone (checkpoints sit at fixed positions, the search
depends on the state only), so a matcher rolled back and replayed, as speculative decoding does, forces
exactly what a straight one does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recipe.constraints import bitmask
from recipe.constraints.vocabulary import Vocabulary

if TYPE_CHECKING:
    from recipe.constraints.backend import Matcher

# Forcing starts at the first checkpoint whose path leaves at most this margin plus a stride: the tokens
# sampled freely in a stride rarely lengthen the path by more.
CLOSING_MARGIN = 12
# Paths are looked for only this close to the budget's end (a search costs tens of masks), or twice the
# start state's path where that is longer.
CLOSING_HORIZON = 96
CHECKPOINT_STRIDE = 8
MAX_NODES = 5000
MAX_DEPTH = 4 * CLOSING_HORIZON
_BRANCH = 2
_PER_CLASS = 4
_FALLBACK = 4
_STRUCTURED = 256  # a state allowing at most this many tokens is a choice inside structure, not free text

_CLOSERS = frozenset(b'"}]')
_STRUCTURE = (b"</", b">\n", b">", b"\n", b",", b":", b"<", b" ")
_VALUES = (b"0", b"null", b"[]", b"{}", b"[", b"{", b"true", b"false", b"1", b'"')


@dataclass(frozen=True, eq=False)
class _Ids:
    """Token ids with their mask word and bit, for testing many ids against a mask at once."""

    ids: np.ndarray
    word: np.ndarray
    bit: np.ndarray

    @classmethod
    def of(cls, ids: list[int]) -> _Ids:
        a = np.array(ids, dtype=np.int64)
        return cls(a, a >> 5, (a & 31).astype(np.uint32))

    def allowed(self, mask: np.ndarray) -> np.ndarray:
        return self.ids[((mask.view(np.uint32)[self.word] >> self.bit) & 1).astype(bool)]


@dataclass(frozen=True, eq=False)
class _Candidates:
    """Per-vocabulary id lists in the search's order of preference."""

    classes: tuple[_Ids, ...]  # closers (longest first), added tokens, structure, values
    by_length: np.ndarray  # every id with a piece, longest piece first


def _candidates(vocab: Vocabulary) -> _Candidates:
    def build() -> _Candidates:
        closers: list[tuple[int, int]] = []
        exact: dict[bytes, int] = {}
        lengths: list[tuple[int, int]] = []
        for i, piece in enumerate(vocab.token_bytes):
            if not piece:
                continue
            lengths.append((-len(piece), i))
            if set(piece) <= _CLOSERS:
                closers.append((-len(piece), i))
            exact.setdefault(piece, i)
        eos = set(vocab.eos_token_ids)
        added = sorted(i for i in vocab.added_bytes if i not in eos and i < vocab.vocab_size)
        ids = ([i for _, i in sorted(closers)], added, [exact[p] for p in _STRUCTURE if p in exact],
               [exact[p] for p in _VALUES if p in exact])
        return _Candidates(tuple(_Ids.of(c) for c in ids), np.array([i for _, i in sorted(lengths)], dtype=np.int64))

    return vocab.backend_state("closing-candidates", build)  # type: ignore[no-any-return]


def _longest_allowed(mask: np.ndarray, by_length: np.ndarray, vocab_size: int, k: int) -> list[int]:
    allowed = bitmask.to_bool(mask, vocab_size)
    return [int(t) for t in by_length[allowed[by_length]][:k]]


class _GiveUp(Exception):
    """The search ran past `MAX_NODES` states or `MAX_DEPTH` tokens."""


def closing_path(matcher: Matcher) -> list[int] | None:
    """Tokens (the last one an EOS id) that end `matcher`'s output from its state, or None when the search
    finds none. The matcher is left in the state it was in.

    The answer depends on the state alone: no bound that depends on where the search started prunes it (an
    overrun abandons the whole search), so the path from the state after its first token is its rest."""
    vocab = matcher.vocabulary
    cands = _candidates(vocab)
    eos = vocab.eos_token_ids[0]
    nodes = 0

    def after(probe: np.ndarray, depth: int) -> int:
        """How many tokens the state allows (-1: it can end); with `depth`, the least over an added token
        next (`</` opens nothing until the DSML marker after it closes)."""
        if matcher.can_terminate():
            return -1
        matcher.fill_grammar_mask(probe)
        score = int(np.bitwise_count(probe.view(np.uint32)).sum())
        if depth:
            for u in [int(u) for u in cands.classes[1].allowed(probe)[:_PER_CLASS]]:
                if matcher.accept(u):
                    score = min(score, 1 + after(probe, depth - 1))  # a token further: worth less
                    matcher.rollback(1)
        return score

    def options(mask: np.ndarray, probe: np.ndarray, branch: int = _BRANCH) -> list[int]:
        """The allowed candidates, most constraining first: a token after which the output can end, then
        fewer allowed tokens next (leaving free text for structure), then the class order."""
        ids: list[int] = []
        for cls in cands.classes:
            ids += [int(t) for t in cls.allowed(mask)[:_PER_CLASS] if int(t) not in ids]
        if not ids:  # literal text the grammar forces: its longest allowed pieces
            ids = _longest_allowed(mask, cands.by_length, vocab.vocab_size, _FALLBACK)
        solid = [t for t in ids if vocab.piece(t).strip()]
        ids = solid or ids  # optional whitespace never brings the end nearer
        if len(ids) == 1:
            return ids
        scored = []
        for rank, t in enumerate(ids):
            if not matcher.accept(t):
                continue
            score = after(probe, depth=1)
            matcher.rollback(1)
            scored.append((score, rank, t))
        return [t for _, _, t in sorted(scored)[:branch]]

    def step() -> None:
        nonlocal nodes
        nodes += 1
        if nodes > MAX_NODES:
            raise _GiveUp

    def greedy() -> list[int] | None:
        """The first option at every state, no backtracking: the rollout that rates an option."""
        path: list[int] = []
        try:
            while not matcher.can_terminate():
                if len(path) >= MAX_DEPTH:
                    return None
                step()
                matcher.fill_grammar_mask(mask)
                opts = options(mask, probe)
                if not opts or not matcher.accept(opts[0]):
                    return None
                path.append(opts[0])
            return [*path, eos]
        finally:
            if path:
                matcher.rollback(len(path))

    def walk(depth: int) -> list[int] | None:
        """At a choice inside structure, the option whose greedy rollout ends soonest first; then backtracking."""
        if matcher.can_terminate():
            return [eos]
        if depth >= MAX_DEPTH:
            raise _GiveUp
        step()
        matcher.fill_grammar_mask(mask)
        structured = int(np.bitwise_count(mask.view(np.uint32)).sum()) <= _STRUCTURED
        opts = options(mask, probe, _FALLBACK if structured else _BRANCH)
        if len(opts) > 1 and structured:  # which key, which parameter: look ahead by rollouts
            rated = []
            for rank, t in enumerate(opts):
                matcher.accept(t)
                rollout = greedy()
                matcher.rollback(1)
                rated.append((len(rollout) if rollout is not None else MAX_DEPTH + 1, rank, t))
            opts = [t for _, _, t in sorted(rated)]
        for t in opts:
            matcher.accept(t)
            try:
                rest = walk(depth + 1)
            finally:
                matcher.rollback(1)
            if rest is not None:
                return [t, *rest]
        return None

    mask, probe = bitmask.allocate(vocab.vocab_size), bitmask.allocate(vocab.vocab_size)
    if matcher.is_terminated():
        return []
    try:
        return walk(0)
    except _GiveUp:
        return None


class BudgetCloser:
    """One matcher's closing schedule for `budget` tokens (see the module docstring); `Matcher` calls
    `forced` before each mask and `rolled_back` after a rollback."""

    __slots__ = ("_checkpoint", "budget", "horizon")

    def __init__(self, budget: int, start_path: int | None = None) -> None:
        """`start_path`: the closing path's length from the start state; a longer one widens the horizon."""
        self.budget = budget
        self.horizon = min(budget, max(CLOSING_HORIZON, 2 * (start_path or 0) + CLOSING_MARGIN))
        self._checkpoint: tuple[int, list[int] | None] | None = None  # (position, path from there)

    def due(self, n: int) -> bool:
        """Position `n` (ids accepted) is inside the horizon, where `forced` may force a token."""
        return self.budget - n <= self.horizon

    def forced(self, matcher: Matcher) -> int | None:
        """The one token the mask may hold at the matcher's state, or None (the grammar's mask): the next
        token of the last checkpoint's path once that path left no more than the margin and a stride."""
        ids = matcher.accepted_ids
        n = len(ids)
        left = self.budget - n
        if left > self.horizon or matcher.can_terminate():
            return None
        c = n - (self.horizon - left) % CHECKPOINT_STRIDE
        if self._checkpoint is None or self._checkpoint[0] != c:
            self._checkpoint = (c, _path_at(matcher, c))
        path = self._checkpoint[1]
        if not path or len(path) + CLOSING_MARGIN + CHECKPOINT_STRIDE < self.budget - c:
            return None
        if ids[c:] != tuple(path[: n - c]):  # only when no token was forced since c (a rollback, a replay)
            return None
        return path[n - c] if n - c < len(path) else None

    def rolled_back(self, n: int) -> None:
        """The matcher now holds `n` ids: forget a checkpoint past them."""
        if self._checkpoint is not None and self._checkpoint[0] > n:
            self._checkpoint = None


def _path_at(matcher: Matcher, position: int) -> list[int] | None:
    """`closing_path` from the state after the first `position` accepted ids (rolled back to and replayed)."""
    later = list(matcher.accepted_ids[position:])
    if later:
        matcher.rollback(len(later))
    try:
        return closing_path(matcher) if not matcher.can_terminate() else None
    finally:
        if later:
            matcher.accept_many(later)
