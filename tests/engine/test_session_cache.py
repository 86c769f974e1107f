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


def test_a_session_key_supersedes_its_older_states_first_under_the_budget() -> None:
    cache = SessionCache(3 * 4 * ROW_BYTES, ttl=1e9)  # room for three states of 4 rows
    cache.put(b"b1", rows(4), 128, session="b")
    cache.put(b"a1", rows(4), 128, session="a")
    cache.put(b"a2", rows(4), 256, session="a")  # supersedes a1
    assert cache.session_point("a") == 256 and cache.stats.superseded == 1
    cache.put(b"c1", rows(4), 128, session="c")  # full: a1 goes, not b1 (the least recently used)
    assert not cache.peek(b"a1") and cache.peek(b"b1") and cache.peek(b"a2") and cache.peek(b"c1")
    uncached = SessionCache(3 * 4 * ROW_BYTES, ttl=1e9)  # the same puts without keys: plain LRU drops b1
    for key, point in ((b"b1", 128), (b"a1", 128), (b"a2", 256), (b"c1", 128)):
        uncached.put(key, rows(4), point)
    assert uncached.peek(b"a1") and not uncached.peek(b"b1")


def test_a_superseded_state_is_still_found_by_hash_until_evicted() -> None:
    cache = SessionCache(1 << 20, ttl=1e9)
    cache.put(b"a1", rows(2), 128, session="a")
    cache.put(b"a2", rows(2), 256, session="a")
    state = cache.get(b"a1")  # a regenerated turn branches from the older boundary
    assert state is not None and state.point == 128
    cache.put(b"x", rows(2), 128, session="a")  # a shallower state does not supersede the newest
    assert cache.session_point("a") == 128 and cache.stats.superseded == 1


@settings(max_examples=80, deadline=None)
@given(budget_rows=st.integers(1, 40), ops=st.lists(
    st.tuples(st.integers(0, 9), st.integers(1, 12), st.booleans(), st.integers(0, 3), st.integers(1, 6)),
    max_size=60))
def test_sessions_budget_model(budget_rows: int, ops: list[tuple[int, int, bool, int, int]]) -> None:
    """Against a model: superseded states (a session's older boundary) leave first, least recently used first;
    the budget always holds; every state the model holds is found by its hash; a session's newest is kept."""
    cache = SessionCache(budget_rows * ROW_BYTES, ttl=1e9)
    order: list[bytes] = []
    sizes: dict[bytes, int] = {}
    points: dict[bytes, int] = {}
    superseded: set[bytes] = set()
    latest: dict[str, bytes] = {}
    owner: dict[bytes, str] = {}

    def drop(k: bytes) -> None:
        order.remove(k)
        del sizes[k], points[k]
        superseded.discard(k)
        s = owner.pop(k, None)
        if s is not None and latest.get(s) == k:
            del latest[s]

    for key_i, n, is_get, session_i, grain in ops:
        key, session = bytes([key_i]), (None if session_i == 0 else f"s{session_i}")
        if is_get:
            hit = cache.get(key) is not None
            assert hit == (key in sizes)
            if hit:
                order.remove(key)
                order.append(key)
                superseded.discard(key)
            continue
        cache.put(key, rows(n, float(key_i)), grain * 128, session)
        if n > budget_rows:
            continue
        if key in sizes:
            drop(key)
        for k in [k for k in order if k in superseded]:
            if sum(sizes.values()) + n <= budget_rows:
                break
            drop(k)
        while order and sum(sizes.values()) + n > budget_rows:
            drop(order[0])
        order.append(key)
        sizes[key], points[key] = n, grain * 128
        if session is not None:
            prev = latest.get(session)
            if prev is not None and prev != key and prev in sizes and points[prev] < points[key]:
                superseded.add(prev)
            latest[session] = key
            owner[key] = session
        assert cache.stats.bytes_held == sum(sizes.values()) * ROW_BYTES <= cache.capacity_bytes
    assert {k for k in sizes if cache.peek(k)} == set(sizes) and len(cache) == len(sizes)
    for s, k in latest.items():
        assert cache.session_point(s) == points[k]
