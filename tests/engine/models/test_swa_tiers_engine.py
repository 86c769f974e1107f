"""DeepSeek-V4 over the lower KV tiers (tiny checkpoint): compressed blocks and grain-boundary window state go
down to the host tier (L2) and the directory tier (L3); a returning session whose device pool was evicted, or a
fresh engine over the same directory, restores them and gives the greedy tokens and logprobs of an
uninterrupted engine with every cache off: with the window state restored, or rebuilt by a replay of the exact
margin (7 + 3 x 7 = 28 tokens for four layers of window 8) when window state is not persisted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from recipe.engine import LLM, SamplingParams
from recipe.engine.kv_kinds import TIERS_NEED_SESSIONS
from recipe.engine.kv_tiers.kind_tiers import budget_shares, kind_namespace
from v4_checkpoints import write_v4_checkpoint

PARAMS = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, logprobs=4)
GRAIN = 16
EXACT = 28
SESSIONS = {"swa_session_bytes": 1 << 20, "swa_session_grain": GRAIN}


@pytest.fixture(scope="module")
def v4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_v4_checkpoint(tmp_path_factory.mktemp("v4_tiers"), "mixed", seed=2)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(path: Path, **config: Any) -> LLM:
    base: dict[str, Any] = {"block_size": 4, "num_kv_blocks": 96, "max_num_batched_tokens": 24, "num_threads": 1}
    return LLM(str(path), **{**base, **config})


def first_turns(seed: int, n: int = 2) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 96, (int(torch.randint(66, 80, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def next_turns(firsts: list[list[int]], answers: list[Any], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed + 1)
    return [p + list(a.new_token_ids) + torch.randint(2, 96, (20,), generator=g).tolist()
            for p, a in zip(firsts, answers, strict=True)]


def generate(llm: LLM, prompts: list[list[int]]) -> list[Any]:
    return [llm.generate([p], PARAMS)[0] for p in prompts]


def same(a: list[Any], b: list[Any]) -> None:
    assert [list(o.new_token_ids) for o in a] == [list(o.new_token_ids) for o in b]
    pairs = [(x, y) for oa, ob in zip(a, b, strict=True) for x, y in zip(oa.new_logprobs, ob.new_logprobs, strict=True)]
    assert all([t for t, _ in x[1]] == [t for t, _ in y[1]] for x, y in pairs)  # the same top 4
    diff = max(max(abs(x[0] - y[0]), *(abs(u[1] - v[1]) for u, v in zip(x[1], y[1], strict=True))) for x, y in pairs)
    assert diff < 1e-4, diff  # fp32 rounding: the top-4 log-probabilities of every step


@pytest.fixture(scope="module")
def uninterrupted(v4_dir: Path) -> tuple[list[list[int]], list[Any]]:
    """Second turns of two sessions and their outputs from an engine with every cache off."""
    llm = make(v4_dir, enable_prefix_caching=False)
    try:
        firsts = first_turns(3)
        seconds = next_turns(firsts, generate(llm, firsts), 3)
        return seconds, generate(llm, seconds)
    finally:
        llm.shutdown()


def disk_units(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.kv") if "quarantine" not in p.parts]


@pytest.mark.parametrize("persist_window", [True, False])
def test_a_fresh_engine_over_the_directory_restores_and_equals_the_uninterrupted_session(
        v4_dir: Path, tmp_path: Path, uninterrupted: tuple[list[list[int]], list[Any]], persist_window: bool) -> None:
    seconds, expected = uninterrupted
    config = {**SESSIONS, "kv_dir": str(tmp_path), "swa_persist_window": persist_window}
    writer = make(v4_dir, **config)
    generate(writer, first_turns(3))
    writer.shutdown()  # writes what is queued
    reader = make(v4_dir, **config)  # a fresh engine: empty device pool and session cache, the same directory
    try:
        outs = generate(reader, seconds)
        stats = reader.engine.stats()
        reader.engine.block_manager.check_invariants()
    finally:
        reader.shutdown()
    same(outs, expected)
    s = stats.swa_sessions
    disk = {t.name: t for t in stats.kv_tiers.tiers}["disk"]
    if persist_window:  # window state at the grain boundary came back from the directory: nothing replayed
        assert s.tier_hits == 2 and s.hits == 2 and s.replays == 0
    else:  # compressed entries from the directory, the window rebuilt by the exact replay
        assert s.hits == 0 and s.replays == 2 and s.replay_tokens == 2 * EXACT
    assert disk.served_tokens == stats.restored_tokens > 0 and disk.corruptions == 0
    assert all(o.cached_tokens > 0 for o in outs)


@pytest.mark.parametrize("persist_window", [True, False])
def test_an_evicted_device_pool_restores_from_the_host_tier(
        v4_dir: Path, uninterrupted: tuple[list[list[int]], list[Any]], persist_window: bool) -> None:
    seconds, expected = uninterrupted
    llm = make(v4_dir, num_kv_blocks=48, kv_host_bytes=4 << 20, swa_persist_window=persist_window, **SESSIONS)
    clock = FakeClock()
    llm.engine.swa_sessions.cache.clock = clock
    try:
        generate(llm, first_turns(3))
        g = torch.Generator().manual_seed(99)  # other sessions take every block of the device pool
        generate(llm, [torch.randint(2, 96, (150,), generator=g).tolist() for _ in range(3)])
        clock.now += 181.0  # and the session cache's states expired
        before = llm.engine.stats()
        outs = generate(llm, seconds)
        after = llm.engine.stats()
        llm.engine.block_manager.check_invariants()
    finally:
        llm.shutdown()
    same(outs, expected)
    s, s0 = after.swa_sessions, before.swa_sessions
    host = {t.name: t for t in after.kv_tiers.tiers}["host"]
    host0 = {t.name: t for t in before.kv_tiers.tiers}["host"]
    assert host.served_tokens > host0.served_tokens
    if persist_window:
        assert s.tier_hits - s0.tier_hits == 2 and s.replays == s0.replays
    else:
        assert s.replays - s0.replays == 2 and s.replay_tokens - s0.replay_tokens == 2 * EXACT


def test_no_data_loss_on_restart(v4_dir: Path, tmp_path: Path) -> None:
    """Every unit written before a shutdown is on disk, and a restarted engine serves as much of each returning
    prompt from the directory as the engine that never stopped served from its device pool."""
    firsts = first_turns(7, n=3)
    config = {**SESSIONS, "kv_dir": str(tmp_path)}
    live = make(v4_dir, **SESSIONS)
    try:
        seconds = next_turns(firsts, generate(live, firsts), 7)
        kept = [o.cached_tokens for o in generate(live, seconds)]
    finally:
        live.shutdown()
    writer = make(v4_dir, **config)
    try:
        generate(writer, firsts)
        writer.engine.kv_tiers.flush()
        disk = {t.name: t for t in writer.engine.stats().kv_tiers.tiers}["disk"]
    finally:
        writer.shutdown()
    assert disk.write_drops == 0 and disk.blocks_stored == len(disk_units(tmp_path)) > 0
    restarted = make(v4_dir, **config)
    try:
        got = [o.cached_tokens for o in generate(restarted, seconds)]
    finally:
        restarted.shutdown()
    assert got == kept and all(n > 0 for n in got)


def test_tiers_on_and_off_give_the_same_conversation(v4_dir: Path, tmp_path: Path) -> None:
    outs: dict[str, list[Any]] = {}
    for name, config in {"off": SESSIONS, "on": {**SESSIONS, "kv_dir": str(tmp_path), "kv_host_bytes": 1 << 22}}.items():
        llm = make(v4_dir, **config)
        try:
            firsts = first_turns(11)
            seconds = next_turns(firsts, generate(llm, firsts), 11)
            outs[name] = generate(llm, firsts) + generate(llm, seconds)
        finally:
            llm.shutdown()
    same(outs["on"], outs["off"])


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_units_are_refused_and_recomputed(v4_dir: Path, tmp_path: Path,
                                                  uninterrupted: tuple[list[list[int]], list[Any]], damage: str) -> None:
    seconds, expected = uninterrupted
    config = {**SESSIONS, "kv_dir": str(tmp_path)}
    writer = make(v4_dir, **config)
    generate(writer, first_turns(3))
    writer.shutdown()
    units = sorted(disk_units(tmp_path))
    for path in units[:: max(1, len(units) // 6)]:  # a few units of every kind's folder
        data = bytearray(path.read_bytes())
        if damage == "flip":
            data[len(data) // 2] ^= 0xFF
            path.write_bytes(bytes(data))
        else:
            path.write_bytes(bytes(data[: len(data) // 2]))
    reader = make(v4_dir, **config)
    try:
        outs = generate(reader, seconds)
        stats = reader.engine.stats()
        reader.engine.block_manager.check_invariants()
    finally:
        reader.shutdown()
    same(outs, expected)
    disk = {t.name: t for t in stats.kv_tiers.tiers}["disk"]
    assert disk.corruptions >= 1
    assert any(p.is_file() for p in tmp_path.rglob("quarantine/*.kv"))


def test_v4_tiers_need_the_session_cache(v4_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="need the sliding-window session cache"):
        make(v4_dir, kv_dir=str(tmp_path))
    assert "swa_session_bytes" in TIERS_NEED_SESSIONS


def test_each_kind_has_its_own_namespace_and_budget_share() -> None:
    ns = bytes(16)
    names = {kind_namespace(ns, k) for k in ("window", "compressed_4", "compressed_128")}
    assert len(names) == 3 and kind_namespace(ns, "window") != kind_namespace(bytes([1]) + bytes(15), "window")
    shares = budget_shares(1000, {"window": 3.0, "compressed_4": 1.0})
    assert shares == {"window": 750, "compressed_4": 250}


def test_units_keep_the_request_retention_class(v4_dir: Path, tmp_path: Path) -> None:
    from recipe.engine.kv_tiers import unit

    llm = make(v4_dir, kv_dir=str(tmp_path), **SESSIONS)
    try:
        llm.generate(first_turns(5, n=1), SamplingParams(temperature=0.0, max_tokens=4, kv_retention="agent"))
    finally:
        llm.shutdown()
    units = disk_units(tmp_path)
    assert len({p.parent.parent for p in units}) == 3  # the window and both compressed kinds
    assert {unit.read_header(p.read_bytes()).retention_class for p in units} == {"agent"}
