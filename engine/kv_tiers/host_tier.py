"""L2: a host-memory tier in one POSIX shared-memory segment, with a byte budget and LRU eviction.

The segment is self-describing so that another process on the machine (a decode worker taking a prefill's
KV, a tool) can map it by name and read blocks without talking to this one (`HostTierReader`):

    header   64 bytes: magic, version, num_slots, slot_size, namespace
    table    num_slots x 32 bytes: block hash (16), sequence number (8, odd while the slot is written), length
    slots    num_slots x slot_size bytes, each one unit (`unit.py`)

The owning process alone writes; a slot's sequence number works as a seqlock for readers in other
processes. Within the owner a lock orders the scheduler thread (store) against the prefetch thread (load).
"""

from __future__ import annotations

import contextlib
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from multiprocessing import resource_tracker, shared_memory

import numpy as np
from recipe.engine.kv_tiers import unit
from recipe.engine.kv_tiers.tier import StoredBlock, TierStats

_MAGIC = b"RCPKVH01"
_HEAD = struct.Struct("<8sIIQ16s")
_HEAD_SIZE = 64
_ENTRY = struct.Struct("<16sQQ")  # hash, seq, length


def _align(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to


class HostTier:
    name = "host"

    def __init__(self, capacity_bytes: int, namespace: bytes, block_size: int, kv_bytes: int,
                 segment_name: str | None = None) -> None:
        self.namespace = namespace
        self.block_size = block_size
        self.kv_bytes = kv_bytes
        self.unit_bytes = unit.unit_size(block_size, kv_bytes)
        self.slot_size = _align(self.unit_bytes)
        self.num_slots = max(0, (capacity_bytes - _HEAD_SIZE) // (self.slot_size + _ENTRY.size))
        if self.num_slots < 1:
            raise ValueError(f"kv_host_bytes={capacity_bytes} holds no block of {self.unit_bytes} bytes")
        self._table_at = _HEAD_SIZE
        self._data_at = _align(_HEAD_SIZE + self.num_slots * _ENTRY.size, 4096)
        size = self._data_at + self.num_slots * self.slot_size
        self.shm = shared_memory.SharedMemory(name=segment_name, create=True, size=size)
        self.segment_name = self.shm.name
        assert self.shm.buf is not None
        self._mv: memoryview = self.shm.buf
        self._buf = np.ndarray((size,), dtype=np.uint8, buffer=self._mv)
        _HEAD.pack_into(self._mv, 0, _MAGIC, 1, self.num_slots, self.slot_size, namespace)
        self._lru: OrderedDict[bytes, int] = OrderedDict()  # hash -> slot, least recently used first
        self._free = list(range(self.num_slots - 1, -1, -1))
        self._lock = threading.Lock()
        self.stats = TierStats(self.name, capacity_bytes=self.num_slots * self.unit_bytes)

    # ----- the tier interface ---------------------------------------------------------------------------
    def lookup(self, hashes: Sequence[bytes]) -> int:
        with self._lock:
            n = 0
            for h in hashes:
                if h not in self._lru:
                    break
                n += 1
            return n

    def load(self, hashes: Sequence[bytes]) -> list[StoredBlock]:
        out: list[StoredBlock] = []
        with self._lock:
            for h in hashes:
                slot = self._lru.get(h)
                if slot is None:
                    break
                self._lru.move_to_end(h)
                raw = self._slot(slot)[: self.unit_bytes].copy()
                tokens, kv = unit.decode(raw, self.namespace, h, self.kv_bytes)
                out.append(StoredBlock(h, tokens, kv, unit.read_header(raw).retention_class))
        self.stats.hits += len(out)
        self.stats.bytes_read += len(out) * self.unit_bytes
        return out

    def store(self, blocks: Sequence[StoredBlock]) -> None:
        with self._lock:
            for b in blocks:
                if b.block_hash in self._lru:
                    self._lru.move_to_end(b.block_hash)
                    continue
                if self._free:
                    slot = self._free.pop()
                else:
                    _, slot = self._lru.popitem(last=False)
                    self.stats.blocks_evicted += 1
                self._write_slot(slot, b)
                self._lru[b.block_hash] = slot
                self.stats.blocks_stored += 1
                self.stats.bytes_written += self.unit_bytes
            self.stats.used_bytes = len(self._lru) * self.unit_bytes

    def evict(self, now: float) -> int:
        """The host tier keeps no retention: its budget is enforced on every store."""
        return 0

    def close(self) -> None:
        del self._buf, self._mv
        self.shm.close()
        with contextlib.suppress(FileNotFoundError):
            self.shm.unlink()

    def __contains__(self, block_hash: bytes) -> bool:
        with self._lock:
            return block_hash in self._lru

    def __len__(self) -> int:
        return len(self._lru)

    # ----- slots ----------------------------------------------------------------------------------------
    def _slot(self, slot: int) -> np.ndarray:
        at = self._data_at + slot * self.slot_size
        return self._buf[at:at + self.slot_size]

    def _write_slot(self, slot: int, b: StoredBlock) -> None:
        entry_at = self._table_at + slot * _ENTRY.size
        _, seq, _ = _ENTRY.unpack_from(self._mv, entry_at)
        _ENTRY.pack_into(self._mv, entry_at, b"\0" * 16, seq + 1, 0)  # odd: being written
        n = unit.encode_into(self._slot(slot), self.namespace, b.block_hash, b.token_ids, b.kv,
                             b.retention_class, 0.0)
        _ENTRY.pack_into(self._mv, entry_at, b.block_hash, seq + 2, n)


class HostTierReader:
    """Another process's read-only view of a host tier's segment, found by its name."""

    def __init__(self, segment_name: str, namespace: bytes) -> None:
        self.shm = shared_memory.SharedMemory(name=segment_name, create=False)
        # Python < 3.13 registers an attached segment with this process's resource tracker, which would
        # unlink the owner's segment when this process exits: only the owner may unlink it.
        resource_tracker.unregister(self.shm._name, "shared_memory")  # type: ignore[attr-defined]
        assert self.shm.buf is not None
        self._mv: memoryview = self.shm.buf
        magic, _version, self.num_slots, self.slot_size, ns = _HEAD.unpack_from(self._mv, 0)
        if magic != _MAGIC:
            self.shm.close()
            raise ValueError(f"{segment_name} is not a KV host tier segment")
        if ns != namespace:
            self.shm.close()
            raise ValueError("the segment holds another model's KV (namespace differs)")
        self.namespace = ns
        self._data_at = _align(_HEAD_SIZE + self.num_slots * _ENTRY.size, 4096)

    def get(self, block_hash: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """(token ids, KV bytes) of the block, copied out consistently, or None if the segment lacks it."""
        buf = self._mv
        for slot in range(self.num_slots):
            at = _HEAD_SIZE + slot * _ENTRY.size
            h, seq, length = _ENTRY.unpack_from(buf, at)
            if h != block_hash or seq % 2:
                continue
            start = self._data_at + slot * self.slot_size
            raw = np.frombuffer(buf, dtype=np.uint8, count=length, offset=start).copy()
            if _ENTRY.unpack_from(buf, at) != (h, seq, length):
                return None  # rewritten while we copied
            head = unit.read_header(raw)
            tokens, kv = unit.decode(raw, self.namespace, block_hash, head.kv_len)
            return tokens.copy(), kv.copy()
        return None

    def close(self) -> None:
        del self._mv
        self.shm.close()
