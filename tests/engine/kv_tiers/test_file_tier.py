"""The directory tier: persistence, verification and quarantine, budget, retention on a fake clock, a
failing disk, a full write-behind queue, and two processes writing one folder."""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import BLOCK, KV, NS, OTHER_NS, block, same
from recipe.engine.kv_tiers import FileTier, RetentionPolicy, StoredBlock, unit

DAY = 86400.0


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(root: Path, clock: FakeClock | None = None, **kw: object) -> FileTier:
    policy = RetentionPolicy(clock=clock or FakeClock())
    return FileTier(root, NS, BLOCK, KV, policy=policy, sweep_interval_s=None, **kw)  # type: ignore[arg-type]


def hashes(blocks: list[StoredBlock]) -> list[bytes]:
    return [b.block_hash for b in blocks]


def test_blocks_persist_across_instances_and_read_back_exactly(tmp_path: Path) -> None:
    tier = make(tmp_path)
    blocks = [block(i) for i in range(6)]
    tier.store(blocks[:4])
    tier.flush()
    assert tier.stats.blocks_stored == 4 and tier.stats.bytes_written == 4 * tier.unit_bytes
    tier.close()
    again = make(tmp_path)  # a restart: nothing in memory, everything on disk
    try:
        assert again.stats.used_bytes == 4 * again.unit_bytes
        assert again.lookup(hashes(blocks)) == 4
        got = again.load(hashes(blocks))
        assert len(got) == 4 and all(same(a, b) for a, b in zip(got, blocks, strict=False))
        assert again.stats.hits == 4 and again.stats.bytes_read == 4 * again.unit_bytes
        files = sorted(p.name for p in tmp_path.rglob("*.kv"))
        assert files == sorted(b.block_hash.hex() + ".kv" for b in blocks[:4])
        assert not list(tmp_path.rglob("*.tmp"))
    finally:
        again.close()


def test_other_namespace_never_sees_the_blocks(tmp_path: Path) -> None:
    tier = make(tmp_path)
    tier.store([block(0)])
    tier.close()
    other = FileTier(tmp_path, OTHER_NS, BLOCK, KV, sweep_interval_s=None)
    try:
        assert other.lookup([block(0).block_hash]) == 0 and other.load([block(0).block_hash]) == []
    finally:
        other.close()


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _unreadable(path: Path) -> None:
    path.unlink()
    path.mkdir()  # open() fails with an OSError other than "not found" (root ignores file modes)


def _foreign(path: Path) -> None:  # a whole, valid unit of another block under this block's name
    other = block(77)
    path.write_bytes(unit.encode(NS, other.block_hash, other.token_ids, other.kv, "chat", 0).tobytes())


@pytest.mark.parametrize("damage", [_flip, _truncate, _unreadable, _foreign])
def test_damaged_unit_is_a_counted_miss_and_is_quarantined(tmp_path: Path, damage, caplog) -> None:  # type: ignore[no-untyped-def]
    tier = make(tmp_path)
    blocks = [block(i) for i in range(4)]
    tier.store(blocks)
    tier.flush()
    damage(tier.path_of(blocks[2].block_hash))
    try:
        with caplog.at_level(logging.WARNING, logger="recipe.engine.kv_tiers"):
            got = tier.load(hashes(blocks))
        assert [g.block_hash for g in got] == hashes(blocks[:2])  # the run stops at the damaged unit
        assert tier.stats.corruptions == 1
        assert "quarantined" in caplog.text
        assert not tier.path_of(blocks[2].block_hash).exists()
        assert len(list(tier.quarantine_dir.iterdir())) == 1
        assert tier.lookup(hashes(blocks)) == 2
        assert tier.enabled  # a bad unit is not a bad disk
    finally:
        tier.close()


def test_missing_file_after_lookup_is_a_plain_miss(tmp_path: Path) -> None:
    tier = make(tmp_path)
    blocks = [block(i) for i in range(3)]
    tier.store(blocks)
    tier.flush()
    assert tier.lookup(hashes(blocks)) == 3
    tier.path_of(blocks[1].block_hash).unlink()  # e.g. another server's sweeper
    try:
        assert len(tier.load(hashes(blocks))) == 1
        assert tier.stats.corruptions == 0 and tier.stats.misses == 1
    finally:
        tier.close()


def test_disk_budget_evicts_least_recently_used_first(tmp_path: Path) -> None:
    clock = FakeClock()
    tier = make(tmp_path, clock, capacity_bytes=3 * (unit.unit_size(BLOCK, KV)))
    b = [block(i) for i in range(5)]
    try:
        for x in b[:3]:
            clock.now += 1
            tier.store([x])
            tier.flush()
        clock.now += 1
        assert len(tier.load([b[0].block_hash])) == 1  # b0 becomes the most recently used
        clock.now += 1
        tier.store([b[3]])
        tier.flush()
        assert [tier.path_of(x.block_hash).exists() for x in b[:4]] == [True, False, True, True]
        clock.now += 1
        tier.store([b[4]])
        tier.flush()
        assert [tier.path_of(x.block_hash).exists() for x in b] == [True, False, False, True, True]
        assert tier.stats.used_bytes <= 3 * tier.unit_bytes
        assert sum(f.stat().st_size for f in tmp_path.rglob("*.kv")) <= 3 * tier.unit_bytes
    finally:
        tier.close()


def test_retention_sweep_on_a_fake_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    tier = make(tmp_path, clock)
    chat, agent = [block(i, "chat") for i in range(3)], [block(10 + i, "agent") for i in range(3)]
    tier.store(chat + agent)
    tier.flush()
    try:
        clock.now += 2 * DAY
        assert tier.evict(clock.now) == 0
        clock.now += 1 * DAY  # agent units are now just over 3 days unused...
        assert len(tier.load([agent[0].block_hash])) == 1  # ...except this one, used now
        clock.now += 60
        assert tier.evict(clock.now) == 2
        assert [tier.path_of(x.block_hash).exists() for x in agent] == [True, False, False]
        clock.now += 4 * DAY  # chat units: 7 days and a minute unused; agent[0] 4 days
        assert tier.evict(clock.now) == 4
        assert not list(tmp_path.rglob("*.kv"))
    finally:
        tier.close()
    # a fresh instance (a restart) reads the class from the file header
    tier = make(tmp_path, clock)
    tier.store([block(20, "agent"), block(21, "chat")])
    tier.flush()
    tier.close()
    clock.now += 3 * DAY + 1
    again = make(tmp_path, clock)
    try:
        assert again.evict(clock.now) == 1
        assert again.lookup([block(21).block_hash]) == 1 and again.lookup([block(20).block_hash]) == 0
    finally:
        again.close()


def test_full_disk_disables_the_tier_and_serving_goes_on(tmp_path: Path, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    tier = make(tmp_path)
    tier.store([block(0)])
    tier.flush()
    real_write = os.write

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    try:
        with caplog.at_level(logging.WARNING, logger="recipe.engine.kv_tiers"):
            tier.store([block(1)])
            tier.flush()
        monkeypatch.setattr(os, "write", real_write)
        assert not tier.enabled and not tier.stats.enabled
        assert "disabled" in caplog.text and "No space left" in caplog.text
        assert not list(tmp_path.rglob("*.tmp"))  # the temporary was removed
        tier.store([block(2)])  # no-ops from now on
        tier.flush()
        assert tier.lookup([block(0).block_hash]) == 0 and tier.load([block(0).block_hash]) == []
        assert not tier.path_of(block(2).block_hash).exists()
    finally:
        tier.close()


def test_full_write_behind_queue_drops_and_counts_without_blocking(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    gate = threading.Event()
    tier = make(tmp_path, queue_bytes=2 * unit.unit_size(BLOCK, KV))
    real = tier._write

    def slow(b: StoredBlock) -> None:
        gate.wait()
        real(b)

    monkeypatch.setattr(tier, "_write", slow)
    tier._writer._write = slow  # the thread holds the bound method it was given
    try:
        tier.store([block(i) for i in range(10)])  # returns at once although nothing is written
        assert tier.stats.write_drops >= 7
        gate.set()
        tier.flush()
        assert tier.stats.blocks_stored + tier.stats.write_drops == 10
    finally:
        gate.set()
        tier.close()


BIG = 1 << 16


def _writer_process(root: str, k: int, n: int, go: str) -> None:
    tier = FileTier(root, NS, BLOCK, BIG, sweep_interval_s=None, queue_bytes=1 << 30)
    Path(go + f".ready{k}").touch()
    while not Path(go).exists():  # both writers start together
        threading.Event().wait(0.001)
    for i in range(n):  # both processes write blocks 0..n-1 (same bytes) plus their own
        tier.store([block(i, kv_bytes=BIG), block(1000 * (k + 1) + i, kv_bytes=BIG)])
    tier.flush()
    tier.close()


def test_two_processes_write_one_folder_concurrently(tmp_path: Path) -> None:
    root, go = tmp_path / "kv", str(tmp_path / "go")
    child = multiprocessing.get_context("spawn").Process(target=_writer_process, args=(str(root), 1, 150, go))
    child.start()
    while not Path(go + ".ready1").exists():
        assert child.is_alive()
        threading.Event().wait(0.01)
    parent = threading.Thread(target=_writer_process, args=(str(root), 0, 150, go))
    parent.start()
    while not Path(go + ".ready0").exists():
        threading.Event().wait(0.001)
    reader = FileTier(root, NS, BLOCK, BIG, sweep_interval_s=None)
    shared = [block(i, kv_bytes=BIG).block_hash for i in range(150)]
    Path(go).touch()
    loaded = 0
    while parent.is_alive() or child.is_alive():  # a reader never sees a partly written unit
        loaded += sum(len(reader.load([h])) for h in shared[::7])
    parent.join()
    child.join(300)
    assert child.exitcode == 0
    assert reader.stats.corruptions == 0 and loaded > 0
    reader.close()
    tier = FileTier(root, NS, BLOCK, BIG, sweep_interval_s=None)
    try:
        expected = [block(i, kv_bytes=BIG) for i in range(150)]
        expected += [block(1000 * (k + 1) + i, kv_bytes=BIG) for k in range(2) for i in range(150)]
        assert len(list(root.rglob("*.kv"))) == len(expected)
        assert not list(root.rglob("*.tmp"))
        for b in expected:
            got = tier.load([b.block_hash])
            assert len(got) == 1 and same(got[0], b)
        assert tier.stats.corruptions == 0
    finally:
        tier.close()


def test_sweeper_thread_runs_on_the_policy_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    tier = FileTier(tmp_path, NS, BLOCK, KV, policy=RetentionPolicy(clock=clock), sweep_interval_s=0.05)
    try:
        tier.store([block(0, "agent")])
        tier.flush()
        clock.now += 3 * DAY + 1
        for _ in range(200):
            if not tier.path_of(block(0).block_hash).exists():
                break
            threading.Event().wait(0.05)
        assert not tier.path_of(block(0).block_hash).exists()
    finally:
        tier.close()


def test_kv_bytes_are_returned_as_given(tmp_path: Path) -> None:
    tier = make(tmp_path)
    b = block(5)
    tier.store([b])
    tier.flush()
    try:
        got = tier.load([b.block_hash])[0]
        assert got.kv.dtype == np.uint8 and got.kv.tobytes() == b.kv.tobytes()
    finally:
        tier.close()
