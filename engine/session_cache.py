"""Sliding-window session cache (DeepSeek-V4): active sessions' window state in host memory, and the length of
the bounded replay that rebuilds it on a miss.

Window state at a grain boundary g (a multiple of `grain` tokens, 128 by default) is the window rows of the
`rows` tokens before g: every layer's sliding-window key (= value) and the compressors' per-token records,
which is all a V4 sequence needs besides its compressed entries to continue from g. It is stored only at
grain boundaries, keyed by the chained prefix hash of the token block ending at g (the key of the prefix
cache and the KV tiers), so a returning conversation finds it without a session id.

Entries expire `ttl` seconds after their last use (idle TTL, on an injectable `clock`), and the least recently
used go first when `capacity_bytes` would be exceeded. A state stored with an explicit session key (the API's
`prompt_cache_key`, `SamplingParams.session_key`) supersedes that session's older states: they stay usable
(a regenerated or branched turn still finds them by hash) but are the first to go when the budget is short,
before any other session's newest state. The key changes what is kept, never what is used: a state is used
only where the prompt's chained hash at its boundary matches. On a miss, a sequence whose compressed entries up to g
are cached replays only its last `replay_tokens` tokens before g (`engine/kv_kinds.py`, `V4Span.window_from`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class SessionStats:
    """Counters of the session cache (read by `EngineStats.swa_sessions`)."""

    hits: int = 0  # admitted sequences whose window state came from the cache (or the lower KV tiers)
    tier_hits: int = 0  # of the hits, window states the lower KV tiers (host, directory) restored
    misses: int = 0  # admitted sequences that needed window state the cache did not hold
    replays: int = 0  # of the misses, those rebuilt by bounded replay
    replay_tokens: int = 0  # tokens those replays recomputed
    restores: int = 0  # window states written back into the device pool
    restore_seconds: float = 0.0  # time spent writing them (model thread)
    stored: int = 0  # window states persisted (one per grain boundary crossed)
    stored_bytes: int = 0  # bytes persisted in all
    expired: int = 0  # entries dropped by the idle TTL
    evicted: int = 0  # entries dropped by the byte budget
    superseded: int = 0  # states a newer state of the same session key pushed to the front of eviction
    refused: int = 0  # states larger than the whole budget
    bytes_held: int = 0
    entries: int = 0


@dataclass
class WindowState:
    rows: torch.Tensor  # [rows, row_width]: window rows of positions [point - rows, point), host memory
    point: int
    last_used: float

    @property
    def nbytes(self) -> int:
        return self.rows.numel() * self.rows.element_size()


class SessionCache:
    """Window states by the chained hash of the block ending at their grain boundary (idle TTL, byte budget)."""

    def __init__(self, capacity_bytes: int, ttl: float = 180.0, clock: Callable[[], float] = time.monotonic) -> None:
        assert capacity_bytes > 0 and ttl > 0
        self.capacity_bytes, self.ttl, self.clock = capacity_bytes, ttl, clock
        self.stats = SessionStats()
        self._entries: OrderedDict[bytes, WindowState] = OrderedDict()  # least recently used first
        self._superseded: set[bytes] = set()  # states a newer one of their session replaced: evicted first
        self._latest: dict[str, bytes] = {}  # session key -> its newest state
        self._session_of: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, key: bytes) -> bool:
        """Whether a live state is held under `key` (no counting, no refresh)."""
        state = self._entries.get(key)
        return state is not None and self.clock() - state.last_used < self.ttl

    def get(self, key: bytes) -> WindowState | None:
        """The live state under `key`, refreshed (its idle time restarts); None if absent or expired."""
        now = self.clock()
        self.evict(now)
        state = self._entries.get(key)
        if state is None:
            return None
        state.last_used = now
        self._entries.move_to_end(key)
        self._superseded.discard(key)  # in use again (a branch of its session)
        return state

    def put(self, key: bytes, rows: torch.Tensor, point: int, session: str | None = None) -> None:
        """Keep a copy of `rows` (host memory) as the window state at `point`, within the byte budget; with a
        `session` key, the session's previous (shallower) state is superseded."""
        now = self.clock()
        self.evict(now)
        state = WindowState(rows.detach().to("cpu", copy=True), point, now)
        if state.nbytes > self.capacity_bytes:
            self.stats.refused += 1
            return
        if key in self._entries:
            self._drop(key)
        self._make_room(state.nbytes)
        self._entries[key] = state
        self.stats.bytes_held += state.nbytes
        self.stats.stored += 1
        self.stats.stored_bytes += state.nbytes
        self.stats.entries = len(self._entries)
        if session is not None:
            prev = self._latest.get(session)
            if prev is not None and prev != key and prev in self._entries and self._entries[prev].point < point:
                self._superseded.add(prev)
                self.stats.superseded += 1
            self._latest[session] = key
            self._session_of[key] = session

    def session_point(self, session: str) -> int | None:
        """The grain boundary of `session`'s newest held state (None if none is held)."""
        key = self._latest.get(session)
        state = None if key is None else self._entries.get(key)
        return None if state is None else state.point

    def _drop(self, key: bytes) -> WindowState:
        state = self._entries.pop(key)
        self.stats.bytes_held -= state.nbytes
        self._superseded.discard(key)
        session = self._session_of.pop(key, None)
        if session is not None and self._latest.get(session) == key:
            del self._latest[session]
        return state

    def _make_room(self, nbytes: int) -> None:
        """Evict until `nbytes` more fit: superseded states first (least recently used first), then the rest."""
        if self.stats.bytes_held + nbytes <= self.capacity_bytes:
            return
        for key in [k for k in self._entries if k in self._superseded]:
            self._drop(key)
            self.stats.evicted += 1
            if self.stats.bytes_held + nbytes <= self.capacity_bytes:
                return
        while self._entries and self.stats.bytes_held + nbytes > self.capacity_bytes:
            self._drop(next(iter(self._entries)))
            self.stats.evicted += 1

    def evict(self, now: float | None = None) -> int:
        """Drop the states idle for `ttl` seconds or more as of `now`; returns how many went."""
        now = self.clock() if now is None else now
        n = 0
        while self._entries:
            key, state = next(iter(self._entries.items()))
            if now - state.last_used < self.ttl:
                break
            self._drop(key)
            n += 1
        self.stats.expired += n
        self.stats.entries = len(self._entries)
        return n


def replay_tokens(model: Any, margin: int | None, block_size: int) -> int:
    """Tokens replayed before a grain boundary on a window miss, a whole number of blocks: the model's exact
    margin (`exact_replay_tokens`, every layer's window rows bit-for-bit those of an uninterrupted run, up to
    fp32 rounding) when `margin` is None, else the bounded `sliding_window + margin` (never less than the
    lookback a step reads). The bounded replay's divergence is measured by `bench/swa_sessions.py`."""
    layers = model.decoder_layers()
    lookback = max(layer.self_attn.lookback for layer in layers)
    tokens = model.exact_replay_tokens() if margin is None else max(lookback, layers[0].self_attn.window + margin)
    return -(-tokens // block_size) * block_size


def window_rows_per_state(lookback: int, block_size: int) -> int:
    """Rows a window state keeps: the lookback rounded up to whole blocks (restored blocks are then complete
    and can be registered in the prefix cache like computed ones)."""
    return -(-lookback // block_size) * block_size
