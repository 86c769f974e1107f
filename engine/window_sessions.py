"""What the multi-kind block manager (`engine/kv_kinds.py`) does with the sliding-window session cache: copy a
sequence's window rows out at each grain boundary it crosses, and write a cached state back into new window
blocks. Rows are read on the scheduler thread from blocks the sequence still holds (the block manager keeps
them until they are copied) and written on the model thread before the step that reads them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from recipe.engine.session_cache import SessionCache, WindowState, replay_tokens, window_rows_per_state

if TYPE_CHECKING:
    from recipe.engine.config import EngineConfig


class WindowSessions:
    def __init__(self, cache: SessionCache, window_pool: torch.Tensor, grain: int, rows: int,
                 replay: int | None, exact: bool = True) -> None:
        nb, bs, width = window_pool.shape
        assert grain % bs == 0 and rows % bs == 0 and rows <= grain, (grain, rows, bs)
        self.cache, self.grain, self.rows, self.replay = cache, grain, rows, replay
        self.exact = exact  # a replay rebuilds the window exactly (the exact margin, or a margin at least as long)
        self.block_size = bs
        self._flat = window_pool.view(nb * bs, width)

    @classmethod
    def from_config(cls, config: EngineConfig, model: Any) -> WindowSessions:
        """The session cache `EngineConfig` asks for (`swa_session_bytes`, `_ttl`, `_grain`, `swa_replay*`)."""
        session, block_size = config.session, config.kv.block_size
        if session.swa_session_bytes is None:
            raise ValueError("the sliding-window session cache needs swa_session_bytes")
        lookback = max(layer.self_attn.lookback for layer in model.decoder_layers())
        rows = window_rows_per_state(lookback, block_size)
        if session.swa_session_grain < rows:
            raise ValueError(f"swa_session_grain must be >= the window state ({rows} tokens)")
        for spec in model.cache_specs()[1:]:
            if session.swa_session_grain % spec.tokens_per_row:
                raise ValueError(f"swa_session_grain must be a multiple of compression rate {spec.tokens_per_row}")
        replay = replay_tokens(model, session.swa_replay_margin, block_size) if session.swa_replay else None
        cache = SessionCache(session.swa_session_bytes, session.swa_session_ttl)
        exact = replay is None or replay >= model.exact_replay_tokens()
        return cls(cache, model.pools["window"], session.swa_session_grain, rows, replay, exact)

    @property
    def stats(self) -> Any:
        return self.cache.stats

    def _slots(self, blocks: Sequence[int]) -> torch.Tensor:
        ids = torch.as_tensor(list(blocks), dtype=torch.int64, device=self._flat.device)
        return (ids[:, None] * self.block_size + torch.arange(self.block_size, device=ids.device)).reshape(-1)

    def snapshot(self, blocks: Sequence[int], key: bytes, point: int, session: str | None = None) -> None:
        """Keep the rows of `blocks` (the `rows` tokens before grain boundary `point`) under `key` (and as
        `session`'s newest state)."""
        assert len(blocks) * self.block_size == self.rows and point % self.grain == 0
        self.cache.put(key, self._flat.index_select(0, self._slots(blocks)), point, session)

    def writer(self, blocks: Sequence[int], state: WindowState) -> Callable[[], None]:
        """The write of `state` into window blocks `blocks`, for the model thread to run before its step."""
        slots = self._slots(blocks)
        stats = self.cache.stats

        def write() -> None:
            start = time.perf_counter()
            self._flat.index_copy_(0, slots, state.rows.to(self._flat.device, self._flat.dtype))
            stats.restores += 1
            stats.restore_seconds += time.perf_counter() - start

        return write
