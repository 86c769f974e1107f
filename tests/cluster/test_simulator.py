"""The discrete-event model: exact on cases with a closed form, shows the interference disaggregation removes,
runs the production autoscaler policy through a phase shift without losing a request, fits its curves."""

from __future__ import annotations

import pytest
from recipe.cluster.autoscaler import Autoscaler, AutoscalerPolicy
from recipe.cluster.sim.cluster import SimRequest, simulate
from recipe.cluster.sim.curves import StepCurves
from recipe.cluster.sim.goodput import attainment, diurnal_trace, goodput, poisson_trace

CURVES = StepCurves(prefill_base=0.01, prefill_per_token=0.001, decode_base=0.02, decode_per_seq=0.001,
                    decode_per_ctx=0.0, transfer_per_token=0.0001)


def test_one_request_matches_the_closed_form() -> None:
    r = simulate([SimRequest(1.0, 100, 11)], CURVES, ["prefill", "decode"]).requests[0]
    assert r.ttft == pytest.approx(0.01 + 0.1)
    assert r.done == pytest.approx(1.0 + 0.11 + 0.01 + 10 * 0.021)
    c = simulate([SimRequest(1.0, 100, 11)], CURVES, ["both"]).requests[0]
    assert c.ttft == pytest.approx(0.11) and c.tpot == pytest.approx(0.021)


def test_prefill_bursts_slow_colocated_decoding_but_not_disaggregated() -> None:
    long = SimRequest(0.0, 10, 200)
    burst = [SimRequest(0.5 + 0.2 * i, 1500, 2) for i in range(10)]
    dis = simulate([long, *burst], CURVES, ["prefill", "decode"]).requests[0]
    long2 = SimRequest(0.0, 10, 200)
    col = simulate([long2, *[SimRequest(b.arrival, b.prompt, b.output) for b in burst]], CURVES, ["both", "both"])
    assert dis.tpot < 0.024  # one or two burst rows share its decode steps
    assert col.requests[0].tpot > 1.5 * dis.tpot


def test_goodput_favours_disaggregation_on_decode_heavy_load_under_a_tight_tpot_slo() -> None:
    curves = StepCurves(0.01, 0.0004, 0.03, 0.001, 1e-6, transfer_per_token=2e-6)
    args = {"prompt": 256, "output": 64, "ttft_slo": 1.0, "tpot_slo": 0.05, "count": 120, "iterations": 9}
    dis = goodput(curves, ["prefill", "decode"], **args)  # type: ignore[arg-type]
    col = goodput(curves, ["both", "both"], **args)  # type: ignore[arg-type]
    assert dis > col > 0


def test_autoscaler_follows_a_phase_shift_and_loses_no_request() -> None:
    prefill_phase = poisson_trace(3.0, 300, 800, 4, seed=1)  # ~100 s, more prompt tokens than 2 prefill instances take
    decode_phase = [SimRequest(150.0 + r.arrival, r.prompt, r.output) for r in poisson_trace(20.0, 1500, 16, 120, seed=2)]
    policy = AutoscalerPolicy(ttft_slo_s=1.0, tpot_slo_s=0.1, queue_tokens_high=4000, confirm=2, cooldown_s=15)
    res = simulate(prefill_phase + decode_phase, CURVES, ["prefill", "prefill", "decode", "decode"],
                   autoscaler=Autoscaler(policy), interval_s=2.0, switch_s=1.0)
    assert all(r.done is not None for r in res.requests)
    moves = [(float(d.split("s ")[0]), d.split(":")[0].split(" ")[1]) for d in res.decisions]
    assert any(t < 150 and m == "decode->prefill" for t, m in moves), res.decisions
    assert any(t > 150 and m == "prefill->decode" for t, m in moves), res.decisions
    assert res.timeline[-1][1].get("decode", 0) >= 2


def test_fit_recovers_the_curves() -> None:
    pre = [(t, CURVES.step(t, 0, 0)) for t in (16, 64, 256, 1024)]
    dec = [(b, c, 0.02 + 0.001 * b + 1e-6 * c) for b, c in ((1, 100), (8, 900), (32, 5000), (4, 20000))]
    f = StepCurves.fit(pre, dec)
    assert f.prefill_per_token == pytest.approx(0.001) and f.prefill_base == pytest.approx(0.01)
    assert f.decode_per_seq == pytest.approx(0.001) and f.decode_per_ctx == pytest.approx(1e-6)


def test_diurnal_trace_has_a_night_trough() -> None:
    trace = diurnal_trace(2.0, 0.1, 100, 10, seconds=8640.0, seed=3)
    night = sum(1 for r in trace if abs(r.arrival / 8640 - 4 / 24) < 1 / 24)
    day = sum(1 for r in trace if abs(r.arrival / 8640 - 16 / 24) < 1 / 24)
    assert day > 4 * night > 0
    assert attainment(simulate(trace[:50], CURVES, ["both"]).requests, 100.0, 100.0) == 1.0
