"""The autoscaler's policy on synthetic metric streams: it moves a worker toward the role under pressure,
only after `confirm` consecutive observations, never within the cooldown, never below `min_per_role`,
and states its reason."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.cluster.autoscaler import Autoscaler, AutoscalerPolicy
from recipe.cluster.live_metrics import LiveMetrics, Window, percentile

POLICY = AutoscalerPolicy(ttft_slo_s=1.0, tpot_slo_s=0.1, queue_tokens_high=1000, kv_high=0.8, low=0.6, confirm=3,
                          cooldown_s=10.0, min_per_role=1)


def metrics(queue: int = 0, ttft: float = 0.0, kv: float = 0.0, tpot: float = 0.0, p: int = 2, d: int = 2) -> LiveMetrics:
    return LiveMetrics(queue, ttft, kv, tpot, p, d)


def test_prefill_backlog_moves_a_decode_worker_after_confirmation() -> None:
    a = Autoscaler(POLICY)
    hot = metrics(queue=5000, ttft=3.0, kv=0.2, tpot=0.02)
    assert a.observe(hot, 0.0) is None
    assert a.observe(hot, 1.0) is None
    d = a.observe(hot, 2.0)
    assert d is not None and (d.from_role, d.to_role) == ("decode", "prefill")
    assert "prefill queue 5000 tokens" in d.reason and "TTFT p90 3.000s" in d.reason


def test_decode_pressure_moves_a_prefill_worker() -> None:
    a = Autoscaler(POLICY)
    hot = metrics(queue=10, ttft=0.1, kv=0.95, tpot=0.3)
    decisions = [a.observe(hot, float(t)) for t in range(3)]
    assert decisions[:2] == [None, None]
    assert decisions[2] is not None and (decisions[2].from_role, decisions[2].to_role) == ("prefill", "decode")


def test_a_lagging_percentile_moves_nothing_to_a_role_without_work() -> None:
    """A TTFT p90 left over from a backlog that is gone (empty prefill queue), or a TPOT p90 with no decode KV
    in use, is no reason to move a worker: it would find nothing to do."""
    a = Autoscaler(POLICY)
    for t in range(10):
        assert a.observe(metrics(queue=0, ttft=50.0, kv=0.1, tpot=0.01), float(t)) is None
        assert a.observe(metrics(queue=10, ttft=0.1, kv=0.0, tpot=5.0), float(t)) is None
    b = Autoscaler(POLICY)  # the same latency with work waiting does move one
    assert [b.observe(metrics(queue=10, ttft=50.0, kv=0.1, tpot=0.01), float(t)) is not None for t in range(3)] == \
        [False, False, True]


def test_an_interrupted_streak_starts_over() -> None:
    a = Autoscaler(POLICY)
    hot, calm = metrics(queue=5000, kv=0.1), metrics()
    for t, m in enumerate([hot, hot, calm, hot, hot]):
        assert a.observe(m, float(t)) is None
    assert a.observe(hot, 5.0) is not None


def test_both_sides_hot_or_the_last_worker_of_a_role_never_move() -> None:
    a = Autoscaler(POLICY)
    for t in range(10):
        assert a.observe(metrics(queue=5000, kv=0.95), float(t)) is None  # nowhere to take capacity from
        assert a.observe(metrics(queue=5000, kv=0.1, d=1), float(t)) is None  # last decode worker stays


def test_cooldown_spaces_moves() -> None:
    a = Autoscaler(POLICY)
    hot = metrics(queue=5000, kv=0.1, d=5)
    moves = [t for t in range(60) if a.observe(hot, float(t)) is not None]
    assert moves[0] == 2 and all(b - a_ >= POLICY.cooldown_s for a_, b in itertools.pairwise(moves))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20000), st.floats(0, 5), st.floats(0, 1), st.floats(0, 1),
                          st.integers(1, 4), st.integers(1, 4), st.floats(0.01, 5)), min_size=1, max_size=80))
def test_any_stream_respects_confirmation_cooldown_and_minimums(stream: list[tuple]) -> None:  # type: ignore[type-arg]
    a = Autoscaler(POLICY)
    now, last_move = 0.0, float("-inf")
    for queue, ttft, kv, tpot, p, d, dt in stream:
        now += dt
        m = metrics(queue, ttft, kv, tpot, p, d)
        decision = a.observe(m, now)
        if decision is None:
            continue
        assert now - last_move >= POLICY.cooldown_s
        last_move = now
        leaving = p if decision.from_role == "prefill" else d
        assert leaving > POLICY.min_per_role
        hot, cold = ((decision.decode_pressure, decision.prefill_pressure) if decision.to_role == "decode"
                     else (decision.prefill_pressure, decision.decode_pressure))
        assert hot > 1 and cold < POLICY.low and decision.reason


def test_window_percentile_forgets_old_samples() -> None:
    clock = [0.0]
    w = Window(10.0, clock=lambda: clock[0])
    for v in range(1, 11):
        w.add(float(v))
    assert percentile(w.values(), 0.9) == 9.0
    clock[0] = 20.0
    w.add(1.0)
    assert w.values() == [1.0]
