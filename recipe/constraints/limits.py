"""Limits against abuse: spec size and nesting depth, compile timeout off the caller's thread, and a
compiled-constraint cache bounded in bytes (an unbounded one is a denial-of-service)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from recipe.constraints.kinds import ConstraintError

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    max_spec_bytes: int = 512 * 1024
    max_depth: int = 64
    max_nodes: int = 50_000
    timeout_s: float = 10.0
    cache_bytes: int = 256 * 1024 * 1024


DEFAULT_LIMITS = Limits()


def check_size(spec_text: str, limits: Limits = DEFAULT_LIMITS) -> None:
    n = len(spec_text.encode("utf-8"))
    if n > limits.max_spec_bytes:
        raise ConstraintError(f"constraint is {n} bytes; the limit is {limits.max_spec_bytes}")


def check_depth(value: Any, limits: Limits = DEFAULT_LIMITS) -> None:
    """Iteratively measure nesting depth and node count of a JSON value (no recursion to blow up)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        v, d = stack.pop()
        nodes += 1
        if d > limits.max_depth:
            raise ConstraintError(f"schema nesting is deeper than {limits.max_depth} levels")
        if nodes > limits.max_nodes:
            raise ConstraintError(f"schema has more than {limits.max_nodes} nodes")
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)


# Daemon worker threads: a compile that overruns its timeout keeps running (native code cannot be
# interrupted) but the caller gets its error at once; the pool is small so runaway compiles are bounded.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="recipe-constraint-compile")


def run_with_timeout(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """Run `fn` on a worker thread; raise `ConstraintError` if it takes longer than `timeout_s`."""
    if timeout_s <= 0:
        raise ConstraintError("timeout_s must be positive")
    fut = _POOL.submit(fn)
    try:
        return fut.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        fut.cancel()
        raise ConstraintError(f"compiling {what} took longer than {timeout_s:g} s") from None


class ByteBoundedCache:
    """LRU map whose values carry a byte size; total size never exceeds `capacity_bytes`.

    A value larger than the whole capacity is not stored.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Any) -> bool:
        return key in self._items

    def get(self, key: Any) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Any, value: Any, size_bytes: int) -> None:
        if size_bytes > self.capacity_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size_bytes)
            self._bytes += size_bytes
            while self._bytes > self.capacity_bytes:
                _, (_, sz) = self._items.popitem(last=False)
                self._bytes -= sz

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
