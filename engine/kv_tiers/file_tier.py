"""L3: a persistent directory tier (`--kv-dir`), one file per block, shared by every server that mounts it.

Layout: `ROOT/<namespace>/<first hash byte>/<block hash>.kv`, where the namespace digest covers the model
fingerprint, dtype, block size, KV layout version and tokenizer, so two models (or two dtypes of one) never
share a file. Each file is one unit (`unit.py`: header, token ids, KV, XXH3-64 checksum). Why one file per block:
`bench/kv_tiers.py --only unit` (SmolLM2 fp32 blocks of 720 KiB, 128 blocks, verified reads) measured
per-block files at 0.92x the read rate of 8-block run files and 0.59x their write rate (shared machine,
load ~15). Reads are the restore path and are on par; writes happen behind the step on the write-behind
thread. Per-block files keep content addressing by the chained hash, deduplication across prompts that
share a prefix, LRU and retention at block grain, and need no index that concurrent writers would share;
3FS's FUSE client also serialises concurrent writes to one file, and favours many files.

Writes go through a write-behind thread (`write_behind.py`): temporary file in the target folder, then
`os.replace`, so readers in any process see a whole unit or none, and two writers of one block both write
the same bytes. Reads verify namespace, hash, size and checksum; a unit that fails is a counted miss, moved
to `quarantine/`, and recomputed by the engine. A unit's last use is its file's mtime (set from the
policy clock on store and on every hit), so the LRU order and the retention sweep see other servers' use
too. Any `OSError` while writing (a full disk, an I/O error) disables the tier with a warning; serving
goes on without it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from recipe.engine.kv_tiers import unit
from recipe.engine.kv_tiers.retention import RetentionPolicy
from recipe.engine.kv_tiers.tier import StoredBlock, TierStats
from recipe.engine.kv_tiers.write_behind import WriteBehind

log = logging.getLogger("recipe.engine.kv_tiers")
SUFFIX = ".kv"
STALE_TEMP_S = 3600.0
_tmp_ids = itertools.count()


@dataclass
class _Entry:
    size: int
    last_used: float
    retention_class: str | None  # None until read from the header (files found on disk)


class FileTier:
    name = "disk"

    def __init__(self, root: str | Path, namespace: bytes, block_size: int, kv_bytes: int, *,
                 capacity_bytes: int | None = None, policy: RetentionPolicy | None = None,
                 queue_bytes: int = 256 << 20, fsync: bool = False, sweep_interval_s: float | None = 60.0,
                 read_threads: int = 4) -> None:
        self.namespace = namespace
        self.block_size, self.kv_bytes = block_size, kv_bytes
        self.unit_bytes = unit.unit_size(block_size, kv_bytes)
        self.capacity_bytes = capacity_bytes
        self.policy = policy or RetentionPolicy()
        self.fsync = fsync
        self.dir = Path(root) / namespace.hex()
        self.quarantine_dir = self.dir / "quarantine"
        self.stats = TierStats(self.name, capacity_bytes=capacity_bytes or 0)
        self._index: OrderedDict[bytes, _Entry] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self._disabled_reason: str | None = None
        try:
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            self._rescan()
        except OSError as exc:
            self._disable(f"cannot use {self.dir}: {exc}")
        self._readers = ThreadPoolExecutor(read_threads, thread_name_prefix="recipe-kv-read")
        self._writer: WriteBehind[StoredBlock] = WriteBehind(self._write, max(1, queue_bytes // self.unit_bytes))
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if sweep_interval_s is not None:
            self._sweeper = threading.Thread(target=self._sweep_loop, args=(sweep_interval_s,),
                                             name="recipe-kv-sweeper", daemon=True)
            self._sweeper.start()

    @property
    def enabled(self) -> bool:
        return self._disabled_reason is None

    def path_of(self, block_hash: bytes) -> Path:
        return self.dir / f"{block_hash[0]:02x}" / f"{block_hash.hex()}{SUFFIX}"

    # ----- the tier interface ---------------------------------------------------------------------------
    def lookup(self, hashes: Sequence[bytes]) -> int:
        if not self.enabled:
            return 0
        n = 0
        for h in hashes:
            with self._lock:
                known = h in self._index
            if not known and not self._discover(h):
                break
            n += 1
        return n

    def load(self, hashes: Sequence[bytes]) -> list[StoredBlock]:
        """Units are read and verified on `read_threads` threads (file reads and XXH3 release the GIL)."""
        out: list[StoredBlock] = []
        if not self.enabled:
            return out
        now = self.policy.clock()
        futures = [self._readers.submit(self._read, h, now) for h in hashes]
        for i, future in enumerate(futures):
            block = future.result()
            if block is None:
                for rest in futures[i + 1:]:
                    rest.cancel()
                break
            out.append(block)
        self.stats.hits += len(out)
        return out

    def store(self, blocks: Sequence[StoredBlock]) -> None:
        """Queue blocks for writing (never blocks; a full queue drops and counts)."""
        if not self.enabled:
            return
        for b in blocks:
            with self._lock:
                known = b.block_hash in self._index
            if known:
                continue
            if not self._writer.submit(b):
                self.stats.write_drops += 1

    def evict(self, now: float) -> int:
        """Refresh the view of the folder, delete expired units and stale temporaries, then enforce the budget."""
        if not self.enabled:
            return 0
        try:
            self._rescan()
        except OSError as exc:
            log.warning("KV directory tier: rescan of %s failed: %s", self.dir, exc)
            return 0
        gone = 0
        with self._lock:
            candidates = [(h, e) for h, e in self._index.items() if now - e.last_used > self.policy.shortest]
        for h, e in candidates:
            if e.retention_class is None:
                e.retention_class = self._read_class(h)
            if self.policy.expired(e.retention_class or "", e.last_used, now):
                gone += self._delete(h)
        gone += self._enforce_budget()
        self._clean_folder(now)
        self.stats.blocks_evicted += gone
        return gone

    def flush(self) -> None:
        """Wait for queued writes (tests and shutdown)."""
        self._writer.flush()

    def close(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join()
        self._writer.close()
        self._readers.shutdown(wait=True)

    # ----- reading --------------------------------------------------------------------------------------
    def _discover(self, h: bytes) -> bool:
        """A unit another server wrote since our last scan."""
        try:
            st = self.path_of(h).stat()
        except OSError:
            return False
        with self._lock:
            if h not in self._index:
                self._index[h] = _Entry(st.st_size, st.st_mtime, None)
                self._index.move_to_end(h)
                self.stats.used_bytes += st.st_size
        return True

    def _read(self, h: bytes, now: float) -> StoredBlock | None:
        path = self.path_of(h)
        try:
            with open(path, "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                buf = np.empty(size, dtype=np.uint8)
                got = f.readinto(buf.data)
            if got != size:
                raise unit.CorruptUnit(f"short read {got} of {size}")
            head = unit.read_header(buf)
            tokens, kv = unit.decode(buf, self.namespace, h, self.kv_bytes)
        except FileNotFoundError:
            self._forget(h)
            self.stats.misses += 1
            return None
        except (OSError, unit.CorruptUnit) as exc:
            self._quarantine(h, exc)
            return None
        self.stats.bytes_read += size
        with contextlib.suppress(OSError):
            os.utime(path, (now, now))
        with self._lock:
            e = self._index.get(h)
            if e is not None:
                e.last_used, e.retention_class = now, head.retention_class
                self._index.move_to_end(h)
        return StoredBlock(h, tokens, kv, head.retention_class)

    def _read_class(self, h: bytes) -> str | None:
        try:
            with open(self.path_of(h), "rb") as f:
                return unit.read_header(f.read(unit.HEADER_SIZE)).retention_class
        except (OSError, unit.CorruptUnit):
            return None  # unreadable: the longest TTL applies, the budget still can evict it

    def _quarantine(self, h: bytes, why: Exception) -> None:
        self.stats.corruptions += 1
        log.warning("KV directory tier: unit %s failed verification (%s); quarantined, will recompute", h.hex(), why)
        target = self.quarantine_dir / f"{h.hex()}.{os.getpid()}.{next(_tmp_ids)}{SUFFIX}"
        try:
            os.replace(self.path_of(h), target)
        except OSError:
            with contextlib.suppress(OSError):
                self.path_of(h).unlink()
        self._forget(h)

    # ----- writing --------------------------------------------------------------------------------------
    def _write(self, b: StoredBlock) -> None:
        if not self.enabled:
            return
        path = self.path_of(b.block_hash)
        now = self.policy.clock()
        tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_tmp_ids)}.tmp"
        try:
            if path.exists():  # another server wrote it: count it as used, write nothing
                os.utime(path, (now, now))
                size = path.stat().st_size
            else:
                data = unit.encode(self.namespace, b.block_hash, b.token_ids, b.kv, b.retention_class, now)
                path.parent.mkdir(exist_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    view = data.data
                    while view:
                        view = view[os.write(fd, view):]
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.utime(tmp, (now, now))
                os.replace(tmp, path)
                size = data.nbytes
                self.stats.bytes_written += size
                self.stats.blocks_stored += 1
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._disable(f"write to {self.dir} failed: {exc}")
            return
        with self._lock:
            old = self._index.pop(b.block_hash, None)
            if old is not None:
                self.stats.used_bytes -= old.size
            self._index[b.block_hash] = _Entry(size, now, b.retention_class)
            self.stats.used_bytes += size
        self.stats.blocks_evicted += self._enforce_budget()

    def _enforce_budget(self) -> int:
        gone = 0
        while self.capacity_bytes is not None:
            with self._lock:
                if self.stats.used_bytes <= self.capacity_bytes or not self._index:
                    break
                h = next(iter(self._index))
            gone += self._delete(h)
        return gone

    def _delete(self, h: bytes) -> int:
        try:
            self.path_of(h).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("KV directory tier: cannot delete %s: %s", h.hex(), exc)
        return self._forget(h)

    def _forget(self, h: bytes) -> int:
        with self._lock:
            e = self._index.pop(h, None)
            if e is None:
                return 0
            self.stats.used_bytes -= e.size
            return 1

    def _disable(self, reason: str) -> None:
        if self._disabled_reason is None:
            self._disabled_reason = reason
            self.stats.enabled = False
            log.warning("KV directory tier disabled, serving goes on without it: %s", reason)

    # ----- the folder -----------------------------------------------------------------------------------
    def _rescan(self) -> None:
        """Rebuild the index from the folder (other servers write and delete too), LRU order by mtime."""
        found: dict[bytes, tuple[int, float]] = {}
        for sub in os.scandir(self.dir):
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            for f in os.scandir(sub.path):
                if f.name.endswith(SUFFIX) and not f.name.startswith("."):
                    try:
                        st = f.stat()
                        found[bytes.fromhex(f.name[: -len(SUFFIX)])] = (st.st_size, st.st_mtime)
                    except (OSError, ValueError):
                        continue
        with self._lock:
            index: dict[bytes, _Entry] = {}
            for h, (size, mtime) in found.items():
                old = self._index.get(h)
                index[h] = _Entry(size, max(mtime, old.last_used) if old else mtime,
                                  old.retention_class if old else None)
            self._index = OrderedDict(sorted(index.items(), key=lambda kv: kv[1].last_used))
            self.stats.used_bytes = sum(e.size for e in self._index.values())

    def _clean_folder(self, now: float) -> None:
        """Temporaries of crashed writers, and quarantined units older than the shortest retention."""
        try:
            subs = [s.path for s in os.scandir(self.dir) if s.is_dir() and len(s.name) == 2]
            for sub in subs:
                for f in os.scandir(sub):
                    if f.name.endswith(".tmp") and time.time() - f.stat().st_mtime > STALE_TEMP_S:
                        os.unlink(f.path)
            for f in os.scandir(self.quarantine_dir):
                if now - f.stat().st_mtime > self.policy.shortest:
                    os.unlink(f.path)
        except OSError as exc:
            log.warning("KV directory tier: cleaning %s failed: %s", self.dir, exc)

    def _sweep_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.evict(self.policy.clock())
            except Exception:
                log.exception("KV directory tier: sweep failed")
