"""Disaggregated prefill/decode on this machine: SmolLM2, worker processes pinned to disjoint cores.

    python bench/disagg.py --only transfer          # KV hand-off cost per block against the step times
    python bench/disagg.py --only goodput           # 1P+1D against 2 colocated workers, same cores
    python bench/disagg.py --rates 0.2,0.4,0.8 --requests 16

Sections:
  transfer  1 prefill + 1 decode worker; prompts of several lengths; per hand-off: blocks, bytes, time to read
            the blocks out and write the shared-memory payload (prefill side) and to read it into the pool
            (decode side), against the TTFT (prefill step) and TPOT (decode step) seen by the router
  goodput   open-loop Poisson arrivals at each rate, fresh random prompts per point (no prefix-cache help),
            on 1P+1D and on 2 `both` workers behind the same router and the same two cores; a prefill-heavy
            and a decode-heavy workload. SLOs: TTFT <= --ttft-slo x the unloaded TTFT, TPOT <= --tpot-slo x
            the unloaded TPOT (both measured first, on one colocated worker). Goodput = the highest tested rate
            with >= 90% of requests meeting both. TTFT/TPOT p50/p90 per point.
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

from recipe.engine import SamplingParams
from recipe.engine.disagg.config import DisaggConfig
from recipe.engine.disagg.live_metrics import percentile
from recipe.engine.disagg.router import DisaggLLM

WORKLOADS = {"prefill-heavy": (384, 8), "decode-heavy": (32, 64)}  # (prompt tokens, output tokens)


@dataclass
class Result:
    ttft: float
    tpot: float
    tokens: int


def make_router(args: argparse.Namespace, p: int, d: int, b: int) -> DisaggLLM:
    cfg = {"num_threads": 1, "block_size": 16, "kv_cache_bytes": args.pool_bytes, "max_num_batched_tokens": 512}
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
    return Result(first - t0, (last - first) / (n - 1) if n > 1 else 0.0, n)


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


def goodput(args: argparse.Namespace) -> None:
    rates = [float(r) for r in args.rates.split(",")]
    setups = {"1P+1D": (1, 1, 0), "2 colocated": (0, 0, 2)}
    table: dict[tuple[str, str, float], dict[str, float]] = {}
    slos: dict[str, tuple[float, float]] = {}
    for name, (p, d, b) in setups.items():
        engine = make_router(args, p, d, b)
        try:
            run_point(engine, 100.0, 2, "decode-heavy", seed=3)  # warm-up
            for workload in WORKLOADS:
                if workload not in slos:  # unloaded latencies, measured once (on the colocated... first setup)
                    base = [run_point(engine, 1000.0, 1, workload, seed=10 + i)[0] for i in range(3)]
                    slos[workload] = (args.ttft_slo * statistics.median(r.ttft for r in base),
                                      args.tpot_slo * statistics.median(r.tpot for r in base))
                for k, rate in enumerate(rates):
                    res = run_point(engine, rate, args.requests, workload, seed=100 + k)
                    table[(name, workload, rate)] = summarize(res, *slos[workload])
                    s = table[(name, workload, rate)]
                    print(f"  {name:12s} {workload:14s} {rate:5.2f} req/s: attainment {s['attain']:.0%}", file=sys.stderr)
        finally:
            engine._stop_all()
    for workload, (ttft_slo, tpot_slo) in slos.items():
        p, o = WORKLOADS[workload]
        print(f"\n## goodput, {workload} ({p} prompt / {o} output tokens); SLO TTFT <= {ttft_slo * 1e3:.0f} ms, "
              f"TPOT <= {tpot_slo * 1e3:.0f} ms")
        print("| setup | rate req/s | attainment | TTFT p50 / p90 ms | TPOT p50 / p90 ms |")
        print("|---|---|---|---|---|")
        best: dict[str, float] = {}
        for name in setups:
            for rate in rates:
                s = table[(name, workload, rate)]
                print(f"| {name} | {rate} | {s['attain']:.0%} | {s['ttft50'] * 1e3:.0f} / {s['ttft90'] * 1e3:.0f} "
                      f"| {s['tpot50'] * 1e3:.1f} / {s['tpot90'] * 1e3:.1f} |")
                if s["attain"] >= 0.9:
                    best[name] = max(best.get(name, 0.0), rate)
        a, b = best.get("1P+1D", 0.0), best.get("2 colocated", 0.0)
        ratio = f"{a / b:.2f}x" if b else "n/a (colocated met the SLO at no tested rate)"
        print(f"goodput (highest tested rate at >= 90% attainment): 1P+1D {a} req/s, 2 colocated {b} req/s; "
              f"ratio {ratio}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="transfer,goodput")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--pool-bytes", type=int, default=256 << 20)
    ap.add_argument("--rates", default="0.25,0.5,1.0")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--ttft-slo", type=float, default=4.0, help="TTFT SLO as a multiple of the unloaded TTFT")
    ap.add_argument("--tpot-slo", type=float, default=2.0, help="TPOT SLO as a multiple of the unloaded TPOT")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    print(f"# bench/disagg.py on {os.cpu_count()} cores (shared, under load); model {args.model}")
    if "transfer" in only:
        transfer(args)
    if "goodput" in only:
        goodput(args)


if __name__ == "__main__":
    main()
