"""Traces, SLO attainment and goodput (DistServe's measure: the highest request rate at which at least
`target` of requests meet both the TTFT and the TPOT objective)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from recipe.cluster.sim.cluster import SimRequest, simulate
from recipe.cluster.sim.curves import StepCurves


def poisson_trace(rate: float, count: int, prompt: int, output: int, seed: int = 0,
                  spread: float = 0.0) -> list[SimRequest]:
    """`count` arrivals at `rate`/s; lengths uniform within +-`spread` of the given ones."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        p = max(1, round(prompt * (1 + rng.uniform(-spread, spread))))
        o = max(1, round(output * (1 + rng.uniform(-spread, spread))))
        out.append(SimRequest(t, p, o))
    return out


def diurnal_trace(peak_rate: float, trough_fraction: float, prompt: int, output: int, seconds: float = 86400.0,
                  seed: int = 0, spread: float = 0.3) -> list[SimRequest]:
    """A day of arrivals whose rate follows a cosine from the trough (at 04:00) to the peak (at 16:00)."""
    rng = random.Random(seed)

    def rate(t: float) -> float:
        phase = (t / seconds - 4 / 24) * 2 * math.pi
        return peak_rate * (trough_fraction + (1 - trough_fraction) * (1 - math.cos(phase)) / 2)

    t, out = 0.0, list[SimRequest]()
    while True:  # thinning (Lewis-Shedler)
        t += rng.expovariate(peak_rate)
        if t >= seconds:
            return out
        if rng.random() <= rate(t) / peak_rate:
            p = max(1, round(prompt * (1 + rng.uniform(-spread, spread))))
            o = max(1, round(output * (1 + rng.uniform(-spread, spread))))
            out.append(SimRequest(t, p, o))


def attainment(requests: list[SimRequest], ttft_slo: float, tpot_slo: float) -> float:
    ok = sum(1 for r in requests if r.ttft <= ttft_slo and r.tpot <= tpot_slo)
    return ok / max(1, len(requests))


def goodput(curves: StepCurves, roles: list[str], prompt: int, output: int, ttft_slo: float, tpot_slo: float, *,
            count: int = 400, target: float = 0.9, lo: float = 0.01, hi: float = 1000.0, seed: int = 0,
            max_batch_tokens: int = 2048, iterations: int = 14,
            transform: Callable[[StepCurves], StepCurves] | None = None) -> float:
    """Highest rate (bisection on a log scale) at which `target` of a Poisson trace meets both SLOs."""
    c = transform(curves) if transform else curves

    def ok(rate: float) -> bool:
        res = simulate(poisson_trace(rate, count, prompt, output, seed), c, roles, max_batch_tokens=max_batch_tokens)
        return attainment(res.requests, ttft_slo, tpot_slo) >= target

    if not ok(lo):
        return 0.0
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
