"""Disaggregated prefill/decode on this machine: SmolLM2, worker processes pinned to disjoint cores.

    python bench/disagg.py --only transfer          # KV hand-off cost per block against the step times
    python bench/disagg.py --only goodput           # 1P+1D against 2 colocated workers, same cores
    python bench/disagg.py --rates 0.2,0.4,0.8 --requests 16
    python bench/disagg.py --only rebalance         # live --autoscale after a prefill-heavy -> decode-heavy shift

Sections:
  transfer  1 prefill + 1 decode worker; prompts of several lengths; per hand-off: blocks, bytes, time to read
            the blocks out and write the shared-memory payload (prefill side) and to read it into the pool
            (decode side), against the TTFT (prefill step) and TPOT (decode step) seen by the router
  goodput   open-loop Poisson arrivals at each rate, fresh random prompts per point (no prefix-cache help),
            on 1P+1D and on 2 `both` workers behind the same router and the same two cores; a prefill-heavy
            and a decode-heavy workload. SLOs: TTFT <= --ttft-slo x the unloaded TTFT, TPOT <= --tpot-slo x
            the unloaded TPOT (both measured first, on one colocated worker). Goodput = the highest tested rate
            with >= 90% of requests meeting both. TTFT/TPOT p50/p90 per point. Then the simulator
            (cluster/sim) is fed step-time curves fitted from this run's unloaded points (prefill time
            against prompt tokens, decode step against batch and context, hand-off time per token) and
            predicts the same points: its error on attainment, p90 TTFT/TPOT and goodput is printed.
  rebalance 2 prefill + 1 decode worker with the autoscaler on (AutoscalerLoop: the same policy and
            drain-then-switch as `recipe serve --autoscale`); a prefill-heavy phase, then decode-heavy
            arrivals: time from the shift to the autoscaler's decision and to the moved worker taking
            requests, SLO attainment of requests arriving before the shift, during the move and after it.
Timed on a shared 2-core machine under other engineers' load: read the ratios of one run, not the absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass

os.environ.setdefault("TQDM_DISABLE", "1")

from recipe.cluster.config import DisaggConfig
from recipe.cluster.live_metrics import percentile
from recipe.cluster.router import DisaggLLM
from recipe.cluster.sim.cluster import simulate
from recipe.cluster.sim.curves import StepCurves
from recipe.cluster.sim.goodput import attainment, poisson_trace
from recipe.engine import SamplingParams

WORKLOADS = {"prefill-heavy": (384, 8), "decode-heavy": (32, 64)}  # (prompt tokens, output tokens)


@dataclass
class Result:
    ttft: float
    tpot: float
    tokens: int
    arrival: float = 0.0  # time.monotonic() when the request was sent


MAX_BATCH_TOKENS = 512


def make_router(args: argparse.Namespace, p: int, d: int, b: int) -> DisaggLLM:
    cfg = {"num_threads": 1, "block_size": 16, "kv_cache_bytes": args.pool_bytes,
           "max_num_batched_tokens": MAX_BATCH_TOKENS}
    return DisaggLLM(args.model, DisaggConfig(p, d, b, ready_timeout_s=900), **cfg)


def prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(100, 49000) for _ in range(n)]


async def one(engine: DisaggLLM, rid: str, ids: list[int], out_tokens: int, delay: float) -> Result:
    await asyncio.sleep(delay)
    t0 = time.monotonic()
    first = last = None
    n = 0
    async for out in engine.generate(rid, ids, SamplingParams(temperature=0.0, max_tokens=out_tokens, ignore_eos=True)):
        if out.new_token_ids:
            last = time.monotonic()
            first = first or last
            n += len(out.new_token_ids)
    assert first is not None and last is not None
    return Result(first - t0, (last - first) / (n - 1) if n > 1 else 0.0, n, t0)


def run_point(engine: DisaggLLM, rate: float, count: int, workload: str, seed: int) -> list[Result]:
    rng = random.Random(seed)
    p, o = WORKLOADS[workload]
    t, arrivals = 0.0, []
    for _ in range(count):
        arrivals.append(t)
        t += rng.expovariate(rate)
    prompts = [prompt(rng, p) for _ in range(count)]

    async def main() -> list[Result]:
        return await asyncio.gather(*(one(engine, f"s{seed}-{i}", ids, o, a)
                                      for i, (ids, a) in enumerate(zip(prompts, arrivals, strict=True))))

    return asyncio.run(main())


def transfer(args: argparse.Namespace) -> None:
    engine = make_router(args, 1, 1, 0)
    try:
        run_point(engine, 100.0, 2, "decode-heavy", seed=1)  # warm-up
        print("\n## transfer: KV hand-off per block against step time (1P+1D, fp32, block 16)")
        print("| prompt tokens | blocks sent | payload MB | capture ms/block | install ms/block | hand-off ms "
              "| TTFT ms | TPOT ms | hand-off / TTFT | per-block / TPOT |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        rng = random.Random(2)
        for n in (64, 256, 1024):
            rows = []
            for i in range(3):
                before = len(engine.handoffs)
                r = asyncio.run(one(engine, f"t{n}-{i}", prompt(rng, n), 16, 0.0))
                h = engine.handoffs[before]
                rows.append((h, r))
            blocks = statistics.median(h.blocks for h, _ in rows)
            cap = statistics.median(h.capture_s / h.blocks for h, _ in rows) * 1e3
            ins = statistics.median(h.install_s / h.blocks for h, _ in rows) * 1e3
            total = statistics.median(h.capture_s + h.install_s for h, _ in rows) * 1e3
            ttft = statistics.median(r.ttft for _, r in rows) * 1e3
            tpot = statistics.median(r.tpot for _, r in rows) * 1e3
            mb = statistics.median(h.payload_bytes for h, _ in rows) / 1e6
            print(f"| {n} | {blocks:.0f} | {mb:.2f} | {cap:.3f} | {ins:.3f} | {total:.2f} | {ttft:.0f} | {tpot:.1f} "
                  f"| {total / ttft:.3f} | {(cap + ins) / tpot:.4f} |")
    finally:
        engine._stop_all()


def summarize(results: list[Result], ttft_slo: float, tpot_slo: float) -> dict[str, float]:
    ok = sum(1 for r in results if r.ttft <= ttft_slo and r.tpot <= tpot_slo)
    ttfts, tpots = [r.ttft for r in results], [r.tpot for r in results]
    return {"attain": ok / len(results), "ttft50": percentile(ttfts, 0.5), "ttft90": percentile(ttfts, 0.9),
            "tpot50": percentile(tpots, 0.5), "tpot90": percentile(tpots, 0.9)}


def unloaded(engine: DisaggLLM, workload: str, seed: int, batch: int = 1) -> tuple[float, float]:
    """Median TTFT and TPOT of `batch` requests sent together, three times (fresh prompts each time)."""
    runs = [run_point(engine, 1e6, batch, workload, seed=seed + i) for i in range(3)]
    return (statistics.median(r.ttft for rs in runs for r in rs), statistics.median(r.tpot for rs in runs for r in rs))


def fit_curves(points: dict[tuple[str, int], tuple[float, float]], transfer_per_token: float) -> StepCurves:
    """Step curves from unloaded points: TTFT of one request is a prefill step of its prompt; TPOT of `batch`
    requests decoding together is a decode step of that batch over their contexts."""
    prefill = [(WORKLOADS[w][0], ttft) for (w, b), (ttft, _) in points.items() if b == 1]
    decode = [(b, b * (WORKLOADS[w][0] + WORKLOADS[w][1] // 2), tpot) for (w, b), (_, tpot) in points.items()]
    return StepCurves.fit(prefill, decode, transfer_per_token=transfer_per_token)


def predict(curves: StepCurves, roles: list[str], workload: str, rate: float, slo: tuple[float, float],
            count: int) -> dict[str, float]:
    p, o = WORKLOADS[workload]
    res = simulate(poisson_trace(rate, count, p, o, seed=7), curves, roles, max_batch_tokens=MAX_BATCH_TOKENS)
    return {"attain": attainment(res.requests, *slo), "ttft90": percentile([r.ttft for r in res.requests], 0.9),
            "tpot90": percentile([r.tpot for r in res.requests], 0.9)}


def err(pred: float, meas: float) -> str:
    return f"{(pred - meas) / meas:+.0%}" if meas else "n/a"


def goodput(args: argparse.Namespace) -> None:
    rates = [float(r) for r in args.rates.split(",")]
    setups = {"1P+1D": (1, 1, 0), "2 colocated": (0, 0, 2)}
    sim_roles = {"1P+1D": ["prefill", "decode"], "2 colocated": ["both", "both"]}
    table: dict[tuple[str, str, float], dict[str, float]] = {}
    slos: dict[str, tuple[float, float]] = {}
    points: dict[tuple[str, int], tuple[float, float]] = {}
    per_token: list[float] = []
    for name, (p, d, b) in setups.items():
        engine = make_router(args, p, d, b)
        try:
            run_point(engine, 100.0, 2, "decode-heavy", seed=3)  # warm-up
            for workload in WORKLOADS:
                if workload not in slos:  # unloaded latencies, measured once (on the first setup, 1P+1D)
                    points[(workload, 1)] = unloaded(engine, workload, 10)
                    slos[workload] = (args.ttft_slo * points[(workload, 1)][0], args.tpot_slo * points[(workload, 1)][1])
                    if workload == "decode-heavy":
                        points[(workload, 4)] = unloaded(engine, workload, 20, batch=4)
                for k, rate in enumerate(rates):
                    res = run_point(engine, rate, args.requests, workload, seed=100 + k)
                    table[(name, workload, rate)] = summarize(res, *slos[workload])
                    s = table[(name, workload, rate)]
                    print(f"  {name:12s} {workload:14s} {rate:5.2f} req/s: attainment {s['attain']:.0%}", file=sys.stderr)
            per_token += [(h.capture_s + h.install_s) / (h.blocks * engine.block_size) for h in engine.handoffs
                          if h.blocks]
        finally:
            engine._stop_all()
    curves = fit_curves(points, statistics.median(per_token) if per_token else 0.0)
    print(f"\nsimulator curves fitted from this run's unloaded points: {curves}")
    for workload, (ttft_slo, tpot_slo) in slos.items():
        p, o = WORKLOADS[workload]
        print(f"\n## goodput, {workload} ({p} prompt / {o} output tokens); SLO TTFT <= {ttft_slo * 1e3:.0f} ms, "
              f"TPOT <= {tpot_slo * 1e3:.0f} ms; measured, and the simulator's prediction (error vs measured)")
        print("| setup | rate req/s | attainment (sim) | TTFT p50 / p90 ms | sim TTFT p90 ms (err) | TPOT p50 / p90 ms "
              "| sim TPOT p90 ms (err) |")
        print("|---|---|---|---|---|---|---|")
        best: dict[str, float] = {}
        best_sim: dict[str, float] = {}
        for name in setups:
            for rate in rates:
                s = table[(name, workload, rate)]
                q = predict(curves, sim_roles[name], workload, rate, (ttft_slo, tpot_slo), args.sim_requests)
                print(f"| {name} | {rate} | {s['attain']:.0%} ({q['attain']:.0%}) "
                      f"| {s['ttft50'] * 1e3:.0f} / {s['ttft90'] * 1e3:.0f} | {q['ttft90'] * 1e3:.0f} "
                      f"({err(q['ttft90'], s['ttft90'])}) | {s['tpot50'] * 1e3:.1f} / {s['tpot90'] * 1e3:.1f} "
                      f"| {q['tpot90'] * 1e3:.1f} ({err(q['tpot90'], s['tpot90'])}) |")
                if s["attain"] >= 0.9:
                    best[name] = max(best.get(name, 0.0), rate)
                if q["attain"] >= 0.9:
                    best_sim[name] = max(best_sim.get(name, 0.0), rate)
        g_dis, g_col = best.get("1P+1D", 0.0), best.get("2 colocated", 0.0)
        ratio = f"{g_dis / g_col:.2f}x" if g_col else "n/a (colocated met the SLO at no tested rate)"
        print(f"goodput (highest tested rate at >= 90% attainment): 1P+1D {g_dis} req/s, 2 colocated {g_col} req/s; "
              f"ratio {ratio}")
        s_dis, s_col = best_sim.get("1P+1D", 0.0), best_sim.get("2 colocated", 0.0)
        print(f"simulator's goodput on the same rates: 1P+1D {s_dis} req/s ({err(s_dis, g_dis)}), 2 colocated "
              f"{s_col} req/s ({err(s_col, g_col)})")


def rebalance(args: argparse.Namespace) -> None:
    from recipe.cluster.autoscaler import AutoscalerLoop, AutoscalerPolicy

    engine = make_router(args, 2, 1, 0)
    loop = None
    try:
        run_point(engine, 100.0, 2, "decode-heavy", seed=3)  # warm-up
        ttft0, _ = unloaded(engine, "prefill-heavy", 30)
        _, tpot0 = unloaded(engine, "decode-heavy", 40)
        slo = (args.ttft_slo * ttft0, args.tpot_slo * tpot0)
        policy = AutoscalerPolicy(ttft_slo_s=slo[0], tpot_slo_s=slo[1], confirm=2, cooldown_s=10.0)
        loop = AutoscalerLoop(engine, policy, interval_s=0.5)
        loop.start()
        roles: list[tuple[float, int]] = []
        stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                roles.append((time.monotonic(), sum(w["role"] == "decode" and w["state"] == "ready"
                                                    for w in engine.workers())))
                await asyncio.sleep(0.05)

        rng = random.Random(50)

        async def phase(workload: str, rate: float, count: int, start: float, prefix: str) -> list[Result]:
            p, o = WORKLOADS[workload]
            t, tasks = start, []
            for i in range(count):
                tasks.append(one(engine, f"{prefix}{i}", prompt(rng, p), o, t))
                t += rng.expovariate(rate)
            return list(await asyncio.gather(*tasks))

        async def main() -> tuple[list[Result], list[Result], float]:
            w = asyncio.create_task(watch())
            t0 = time.monotonic()
            first = asyncio.create_task(phase("prefill-heavy", args.rebalance_rates[0], args.requests, 0.0, "pre"))
            shift_after = args.requests / args.rebalance_rates[0]
            second = asyncio.create_task(phase("decode-heavy", args.rebalance_rates[1], args.rebalance_requests,
                                               shift_after, "dec"))
            a, b = await first, await second
            await asyncio.sleep(1.0)
            stop.set()
            await w
            return a, b, t0 + shift_after

        before, after, shift = asyncio.run(main())
    finally:
        if loop is not None:
            loop.stop()
        engine._stop_all()
    moved = next((t for t, n in roles if n >= 2), None)
    decided = next((d.time for d in loop.decisions if d.to_role == "decode"), None) if loop else None
    print(f"\n## rebalance with the autoscaler (2P+1D, 3 workers on {len(os.sched_getaffinity(0))} cores: not "
          f"disjoint), SLO TTFT <= {slo[0] * 1e3:.0f} ms, TPOT <= {slo[1] * 1e3:.0f} ms")
    for d in loop.decisions if loop else []:
        print(f"- decision at shift{d.time - shift:+.1f}s: {d.from_role} -> {d.to_role}: {d.reason}")
    if moved is None:
        print("no worker moved to decode during the run: the goal (a measured rebalance) is not met by this run")
    else:
        print(f"shift -> decision {decided - shift if decided else float('nan'):.1f} s; shift -> moved worker "
              f"serving decode {moved - shift:.1f} s")
    cut = moved if moved is not None else float("inf")
    groups = {"prefill-heavy phase": before,
              "decode-heavy, arrived before the move": [r for r in after if r.arrival < cut],
              "decode-heavy, arrived after the move": [r for r in after if r.arrival >= cut]}
    print("| requests | count | attainment | TTFT p90 ms | TPOT p90 ms |")
    print("|---|---|---|---|---|")
    for label, rs in groups.items():
        if rs:
            s = summarize(rs, *slo)
            print(f"| {label} | {len(rs)} | {s['attain']:.0%} | {s['ttft90'] * 1e3:.0f} | {s['tpot90'] * 1e3:.1f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="transfer,goodput")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--pool-bytes", type=int, default=256 << 20)
    ap.add_argument("--rates", default="0.25,0.5,1.0")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--ttft-slo", type=float, default=4.0, help="TTFT SLO as a multiple of the unloaded TTFT")
    ap.add_argument("--tpot-slo", type=float, default=2.0, help="TPOT SLO as a multiple of the unloaded TPOT")
    ap.add_argument("--sim-requests", type=int, default=200, help="requests per simulated point")
    ap.add_argument("--rebalance-rates", default="0.5,1.0", help="arrival rates of the prefill-heavy and the "
                    "decode-heavy phase")
    ap.add_argument("--rebalance-requests", type=int, default=40, help="requests in the decode-heavy phase")
    args = ap.parse_args(argv)
    args.rebalance_rates = [float(r) for r in args.rebalance_rates.split(",")]
    only = set(args.only.split(","))
    print(f"# bench/disagg.py on {os.cpu_count()} cores (shared, under load); model {args.model}")
    if "transfer" in only:
        transfer(args)
    if "goodput" in only:
        goodput(args)
    if "rebalance" in only:
        rebalance(args)


if __name__ == "__main__":
    main()
