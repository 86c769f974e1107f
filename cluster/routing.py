"""Which worker gets a request: prefill by queued prompt tokens (less what its prefix cache likely holds),
decode by KV use and running requests; a colocated (`both`) request with a session key goes back to the
worker its session last ran on while that worker is available (its session cache holds the session's window
state), else by decode's rule. Pure functions over the router's view of each worker."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from recipe.engine.block_manager import chain_hash


@dataclass
class WorkerLoad:
    """The router's view of one worker: what it assigned (exact, immediate) and the worker's last `Stats`."""

    worker_id: int
    role: str
    available: bool = True  # ready, alive, not draining
    queued_prompt_tokens: int = 0  # assigned prefill tokens not yet prefilled (router's count)
    active_requests: int = 0  # requests the router has on this worker
    kv_usage: float = 0.0  # from the worker's last Stats
    running: int = 0


def block_hashes(prompt_ids: list[int], block_size: int, limit: int = 64) -> list[bytes]:
    """Chained hashes of the prompt's leading full blocks (the engine's prefix-cache keys)."""
    out: list[bytes] = []
    h = b""
    for i in range(min((len(prompt_ids) - 1) // block_size, limit)):
        h = chain_hash(h, prompt_ids[i * block_size:(i + 1) * block_size])
        out.append(h)
    return out


class PrefixIndex:
    """Per worker, the block hashes of prompts it prefilled recently (bounded LRU): where a prefix is warm."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._by_worker: dict[int, OrderedDict[bytes, None]] = {}

    def warm_blocks(self, worker_id: int, hashes: list[bytes]) -> int:
        seen = self._by_worker.get(worker_id)
        n = 0
        while seen is not None and n < len(hashes) and hashes[n] in seen:
            n += 1
        return n

    def record(self, worker_id: int, hashes: list[bytes]) -> None:
        seen = self._by_worker.setdefault(worker_id, OrderedDict())
        for h in hashes:
            seen[h] = None
            seen.move_to_end(h)
        while len(seen) > self.capacity:
            seen.popitem(last=False)

    def forget(self, worker_id: int) -> None:
        self._by_worker.pop(worker_id, None)


def pick_prefill(loads: list[WorkerLoad], hashes: list[bytes], index: PrefixIndex, block_size: int) -> WorkerLoad | None:
    """Least queued prompt tokens, counting a warm prefix as tokens it will not compute; ties by id."""
    best: tuple[int, int] | None = None
    choice = None
    for w in loads:
        if not w.available:
            continue
        cost = w.queued_prompt_tokens - index.warm_blocks(w.worker_id, hashes) * block_size
        key = (cost, w.worker_id)
        if best is None or key < best:
            best, choice = key, w
    return choice


def pick_decode(loads: list[WorkerLoad]) -> WorkerLoad | None:
    """Lowest KV use, then fewest requests; ties by id."""
    candidates = [w for w in loads if w.available]
    if not candidates:
        return None
    return min(candidates, key=lambda w: (round(w.kv_usage, 2), w.active_requests + w.running, w.worker_id))


class SessionAffinity:
    """The worker each session key last ran on (bounded LRU)."""

    def __init__(self, capacity: int = 65536) -> None:
        self.capacity = capacity
        self._worker: OrderedDict[str, int] = OrderedDict()

    def worker_of(self, session: str) -> int | None:
        return self._worker.get(session)

    def record(self, session: str, worker_id: int) -> None:
        self._worker[session] = worker_id
        self._worker.move_to_end(session)
        while len(self._worker) > self.capacity:
            self._worker.popitem(last=False)


def pick_colocated(loads: list[WorkerLoad], session: str | None, affinity: SessionAffinity) -> WorkerLoad | None:
    """The session's last worker while it is available, else `pick_decode`'s choice (remembered for the key)."""
    held = None if session is None else affinity.worker_of(session)
    choice = next((w for w in loads if w.worker_id == held and w.available), None) or pick_decode(loads)
    if choice is not None and session is not None:
        affinity.record(session, choice.worker_id)
    return choice
