"""The disaggregation simulator's figures (`cluster/sim`), from step-time curves stated here.

    python bench/disagg_sim.py                  # DistServe-shaped goodput sweep + diurnal autoscaler day
    python bench/disagg_sim.py --only sweep
    python bench/disagg_sim.py --json bench/results   # also write each section's figure there

Sections:
  sweep    goodput (highest rate with >= 90% of requests meeting both TTFT and TPOT SLOs) of 1P+1D against
           2 colocated instances, as the prompt/output ratio varies; same curves, same two instances
  diurnal  a day-long diurnal trace (trough 10% of peak at 04:00) over 8 instances with the production
           autoscaler policy plus scale in/out: SLO attainment per 4-hour slice and instance-hours freed
Curves (per instance): `--curves smollm2` is this engine's SmolLM2 on one core, fitted from an unloaded
measurement stated below (re-measure with bench/disagg.py); `--curves h800` is a per-node curve derived from
DeepSeek's Day-6 figures (73.7k input tok/s per prefill node, 14.8k output tok/s per decode node at ~20 tok/s
per user, i.e. ~740 concurrent sequences), a planning assumption, not a measurement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from recipe.cluster.autoscaler import Autoscaler, AutoscalerPolicy
from recipe.cluster.sim.cluster import simulate
from recipe.cluster.sim.curves import StepCurves
from recipe.cluster.sim.goodput import attainment, diurnal_trace, goodput

CURVES = {
    # one core, fp32, unloaded: ~2.5 ms per prompt token, ~35 ms decode step (+0.5 ms per extra row);
    # hand-off ~0.3 ms per token (shared memory, 46 KB/token)
    "smollm2": StepCurves(0.02, 0.0025, 0.035, 0.0005, 2e-7, transfer_per_token=0.0003),
    # per H800 node, planning figures from DeepSeek Day-6 (see the module docstring)
    "h800": StepCurves(0.005, 1 / 73700, 0.045, 0.0000095, 1e-9, transfer_per_token=2e-6),
}


# capability id -> this run's fields for bench/results/<id>.json (written with --json DIR)
FIGURES: dict[str, dict[str, Any]] = {}


def sweep(curves: StepCurves, name: str) -> None:
    print(f"\n## goodput sweep ({name} curves): 1P+1D vs 2 colocated, SLO TTFT <= 4x and TPOT <= 2x unloaded")
    print("| prompt / output | 1P+1D req/s | 2 colocated req/s | ratio |")
    print("|---|---|---|---|")
    ratios: dict[str, float | None] = {}
    for p, o in ((1024, 16), (512, 64), (256, 128), (128, 256), (32, 512)):
        ttft = 4 * curves.step(p, 0, 0)
        tpot = 2 * curves.step(0, 1, p + o)
        dis = goodput(curves, ["prefill", "decode"], p, o, ttft, tpot + curves.transfer(p) / max(1, o - 1), count=200,
                      iterations=10)
        col = goodput(curves, ["both", "both"], p, o, ttft, tpot + curves.transfer(p) / max(1, o - 1), count=200,
                      iterations=10)
        ratio = f"{dis / col:.2f}" if col else "inf"
        print(f"| {p} / {o} | {dis:.3g} | {col:.3g} | {ratio} |")
        ratios[f"{p}/{o}"] = dis / col if col else None
    FIGURES["disagg_sim_sweep"] = {
        "command": f".venv/bin/python bench/disagg_sim.py --only sweep --curves {name}",
        "figure": "prompt/output " + ", ".join(f"{k} {'inf' if v is None else f'{v:.2f}×'}" for k, v in ratios.items()),
        "data": {"goodput_ratio": ratios},
    }


def diurnal(curves: StepCurves, name: str, peak: float, seconds: float) -> None:
    trace = diurnal_trace(peak, 0.1, 512, 128, seconds=seconds, seed=5)
    ttft = 4 * curves.step(512, 0, 0)
    tpot = 3 * curves.step(0, 1, 640)
    policy = AutoscalerPolicy(ttft_slo_s=ttft, tpot_slo_s=tpot, queue_tokens_high=4096, confirm=3,
                              cooldown_s=seconds / 288, min_per_role=1)
    roles = ["prefill"] * 3 + ["decode"] * 5
    res = simulate(trace, curves, roles, autoscaler=Autoscaler(policy), interval_s=seconds / 1440,
                   switch_s=seconds / 2880, scale_in_out=True)
    static = simulate(diurnal_trace(peak, 0.1, 512, 128, seconds=seconds, seed=5), curves, roles)
    print(f"\n## diurnal day ({name} curves; {len(trace)} requests, peak {peak} req/s, a day of {seconds:.0f} s "
          f"simulated time), 8 instances, SLO TTFT <= {ttft:.3g}s, TPOT <= {tpot:.3g}s")
    print("| slice | attainment autoscaled | attainment static 3P+5D |")
    print("|---|---|---|")
    for k in range(6):
        lo, hi = k * seconds / 6, (k + 1) * seconds / 6
        a = [r for r in res.requests if lo <= r.arrival < hi]
        b = [r for r in static.requests if lo <= r.arrival < hi]
        print(f"| {4 * k:02d}:00-{4 * k + 4:02d}:00 | {attainment(a, ttft, tpot):.1%} | {attainment(b, ttft, tpot):.1%} |")
    total = sum(res.instance_seconds.values())
    off = res.instance_seconds.get("off", 0.0)
    auto_att, static_att = attainment(res.requests, ttft, tpot), attainment(static.requests, ttft, tpot)
    print(f"whole day: autoscaled {auto_att:.1%}, static {static_att:.1%}; "
          f"instance time freed (role off): {off / total:.1%}; role moves: {len(res.decisions)}")
    FIGURES["disagg_sim_diurnal"] = {
        "command": f".venv/bin/python bench/disagg_sim.py --only diurnal --curves {name} --day-seconds {seconds:g}",
        "figure": f"SLO attainment **{auto_att:.1%}** autoscaled vs {static_att:.1%} static; {off / total:.1%} of "
                  f"instance time freed, {len(res.decisions)} role moves",
        "data": {"autoscaled": auto_att, "static": static_att, "freed": off / total, "moves": len(res.decisions)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="sweep,diurnal")
    ap.add_argument("--curves", default="smollm2", choices=sorted(CURVES))
    ap.add_argument("--peak", type=float, default=None, help="diurnal peak req/s (default: per curves)")
    ap.add_argument("--day-seconds", type=float, default=8640.0, help="simulated length of the day")
    ap.add_argument("--json", default=None, metavar="DIR",
                    help="also write each section's figure to DIR/<capability>.json (bench/results feeds "
                         "docs/performance.md)")
    args = ap.parse_args()
    curves = CURVES[args.curves]
    only = set(args.only.split(","))
    if "sweep" in only:
        sweep(curves, args.curves)
    if "diurnal" in only:
        diurnal(curves, args.curves, args.peak or (1.5 if args.curves == "smollm2" else 60.0), args.day_seconds)
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
        from make_performance_doc import merge_result

        for capability, fields in FIGURES.items():
            merge_result(Path(args.json) / f"{capability}.json", fields)


if __name__ == "__main__":
    main()
