"""The sliding-window session cache through the whole engine (tiny DeepSeek-V4): multi-turn sessions whose
window state comes back from the cache (a hit), or after the idle TTL expired on a fake clock, is rebuilt by
a replay of the exact margin, give the greedy tokens and logprobs of the engine with the cache off; the
bounded margin replays `sliding_window + margin` tokens; with replay off a miss recomputes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from recipe.engine import LLM, SamplingParams
from v4_checkpoints import write_v4_checkpoint

PARAMS = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=4)
GRAIN = 16


@pytest.fixture(scope="module")
def v4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_v4_checkpoint(tmp_path_factory.mktemp("v4_sessions"), "mixed", seed=2)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(path: Path, **config: Any) -> LLM:
    base: dict[str, Any] = {"block_size": 4, "num_kv_blocks": 96, "max_num_batched_tokens": 24, "num_threads": 1}
    return LLM(str(path), **{**base, **config})


def conversation(llm: LLM, seed: int, turns: int = 3, gaps: tuple[float, ...] = (), clock: FakeClock | None = None
                 ) -> list[Any]:
    """Two interleaved sessions, `turns` turns each (new user tokens every turn); `gaps[t]` idle seconds pass
    on `clock` before turn t + 1."""
    g = torch.Generator().manual_seed(seed)
    history: dict[int, list[int]] = {0: [], 1: []}
    outs = []
    for t in range(turns):
        for s in (0, 1):
            prompt = history[s] + torch.randint(2, 96, (int(torch.randint(20, 40, (1,), generator=g)),),
                                                generator=g).tolist()
            out = llm.generate([prompt], PARAMS)[0]
            outs.append(out)
            history[s] = prompt + list(out.new_token_ids)
        if clock is not None and t < len(gaps):
            clock.now += gaps[t]
    return outs


def same(a: list[Any], b: list[Any]) -> None:
    assert [list(o.new_token_ids) for o in a] == [list(o.new_token_ids) for o in b]
    diff = max(abs(x[0] - y[0]) for oa, ob in zip(a, b, strict=True)
               for x, y in zip(oa.new_logprobs, ob.new_logprobs, strict=True))
    assert diff < 1e-4, diff


def run(path: Path, gaps: tuple[float, ...] = (), **config: Any) -> tuple[list[Any], Any]:
    llm = make(path, **config)
    clock = FakeClock()
    if llm.engine.swa_sessions is not None:
        llm.engine.swa_sessions.cache.clock = clock
    try:
        outs = conversation(llm, 5, gaps=gaps, clock=clock)
        llm.engine.block_manager.check_invariants()
        return outs, llm.engine.stats().swa_sessions
    finally:
        llm.shutdown()


SESSIONS = {"swa_session_bytes": 1 << 20, "swa_session_grain": GRAIN}


@pytest.fixture(scope="module")
def off(v4_dir: Path) -> list[Any]:
    return run(v4_dir)[0]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_returns_within_the_ttl_hit_and_equal_the_cache_off(v4_dir: Path, off: list[Any], async_scheduling: bool
                                                            ) -> None:
    outs, stats = run(v4_dir, gaps=(60.0, 170.0), async_scheduling=async_scheduling, **SESSIONS)
    same(outs, off)
    assert stats.hits == 4 and stats.misses == 0  # every return (2 sessions x 2) found its window
    assert stats.stored > 0 and stats.restores == 4 and stats.bytes_held > 0


def test_returns_after_the_ttl_replay_the_exact_margin_and_equal_the_cache_off(v4_dir: Path, off: list[Any]
                                                                               ) -> None:
    outs, stats = run(v4_dir, gaps=(181.0, 500.0), **SESSIONS)
    same(outs, off)
    assert stats.hits == 0 and stats.misses == 4  # a replay when it beats recomputing from the best hit:
    assert stats.replays >= 2 and stats.replay_tokens == stats.replays * 28  # 7 + 3 x 7: four layers, window 8
    assert stats.expired > 0


def test_bounded_margin_replays_window_plus_margin(v4_dir: Path) -> None:
    outs, stats = run(v4_dir, gaps=(181.0, 181.0), swa_replay_margin=4, **SESSIONS)
    assert stats.replays >= 2 and stats.replay_tokens == stats.replays * 12  # window 8 + margin 4
    assert all(len(o.new_token_ids) == PARAMS.max_tokens for o in outs)


def test_replay_off_recomputes_a_miss_and_equals_the_cache_off(v4_dir: Path, off: list[Any]) -> None:
    outs, stats = run(v4_dir, gaps=(181.0, 181.0), swa_replay=False, **SESSIONS)
    same(outs, off)
    assert stats.misses == 4 and stats.replays == 0 and stats.replay_tokens == 0


def test_configuration_errors_are_clear(v4_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="swa_session_grain must be a multiple of block_size"):
        make(v4_dir, swa_session_bytes=1 << 20, swa_session_grain=18)
    with pytest.raises(ValueError, match="needs enable_prefix_caching"):
        make(v4_dir, swa_session_bytes=1 << 20, enable_prefix_caching=False)
    with pytest.raises(ValueError, match="swa_session_grain must be >= the window state"):
        make(v4_dir, swa_session_bytes=1 << 20, swa_session_grain=4)
