"""The session cache on its own: idle TTL on a fake clock (a get refreshes it), the byte budget evicts least
recently used states first and never holds more than the budget, a state larger than the budget is refused,
and the replay length follows the margin."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.session_cache import SessionCache

ROW_BYTES = 4 * 8  # 8 float32 per row


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def rows(n: int, fill: float = 1.0) -> torch.Tensor:
    return torch.full((n, 8), fill)


def test_idle_ttl_on_a_fake_clock() -> None:
    clock = Clock()
    cache = SessionCache(1 << 20, ttl=180.0, clock=clock)
    cache.put(b"a", rows(4), 128)
    cache.put(b"b", rows(4), 128)
    clock.now = 179.0
    assert cache.get(b"a") is not None  # used: its idle time restarts
    clock.now = 180.0
    assert cache.get(b"b") is None and cache.stats.expired == 1  # idle 180 s: gone
    clock.now = 358.9
    state = cache.get(b"a")
    assert state is not None and torch.equal(state.rows, rows(4))
    clock.now = 600.0
    assert cache.evict() == 1 and len(cache) == 0 and cache.stats.bytes_held == 0


def test_a_copy_is_kept() -> None:
    source = rows(2)
    cache = SessionCache(1 << 20)
    cache.put(b"k", source, 128)
    source.fill_(7.0)
    state = cache.get(b"k")
    assert state is not None and torch.equal(state.rows, rows(2))


@settings(max_examples=60, deadline=None)
@given(budget_rows=st.integers(1, 40), ops=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 12), st.booleans()),
                                                     max_size=60))
def test_byte_budget_is_enforced_and_evicts_least_recently_used(budget_rows: int,
                                                                 ops: list[tuple[int, int, bool]]) -> None:
    cache = SessionCache(budget_rows * ROW_BYTES, ttl=1e9)
    order: list[bytes] = []  # least recently used first, as the model of the cache
    sizes: dict[bytes, int] = {}
    for key_i, n, is_get in ops:
        key = bytes([key_i])
        if is_get:
            hit = cache.get(key) is not None
            assert hit == (key in sizes)
            if hit:
                order.remove(key)
                order.append(key)
            continue
        cache.put(key, rows(n, float(key_i)), 128)
        if n > budget_rows:
            continue  # refused, nothing changes
        if key in sizes:
            order.remove(key)
            del sizes[key]
        while order and sum(sizes.values()) + n > budget_rows:
            del sizes[order.pop(0)]
        order.append(key)
        sizes[key] = n
        assert cache.stats.bytes_held <= cache.capacity_bytes
        assert cache.stats.bytes_held == sum(sizes.values()) * ROW_BYTES
    assert {k for k in sizes if cache.peek(k)} == set(sizes)
    assert cache.stats.refused == sum(1 for _, n, g in ops if not g and n > budget_rows)
