"""Tiered KV benchmark: SmolLM2 on this machine, every figure a ratio against its anchor measured in the same run.

    python bench/kv_tiers.py                       # every section
    python bench/kv_tiers.py --only trace,restore  # a subset

Sections:
  trace      a seeded trace of chat and agent sessions (shared system prompts of 1-2K tokens, 3-8 turns, Pareto
             think times ordering the turns of interleaved sessions), replayed with a device pool smaller than
             the working set: per-tier hit rates (each tier's share of the measured requests' prompt tokens,
             `engine/kv_tiers/hit_split.py`: they add up to the cached fraction), the fraction of prompt tokens served from cache, and TTFT
             p50/p90 with the tiers (host + directory) against the device pool alone
  restore    TTFT of a 2K-token prompt restored from the directory tier (a fresh engine: empty pool, empty host
             tier) against the same prompt computed from scratch; fresh prompts per timed run
  bandwidth  directory-tier restore bandwidth (read + verify every unit of a prompt) against a raw sequential
             read of the same files with numpy.fromfile, alternating, same files (page cache for both)
  overhead   throughput with both tiers on and nothing to restore (fresh random prompts) against both off
  unit       the on-disk unit: N blocks written and read back as one file per block against one file per run
             of 8 blocks (same bytes, same encoding), to choose the unit
Turns are replayed one at a time in think-time order (no concurrency): TTFT is the prefill each turn needs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF dequantizer's progress bar

import numpy as np
import torch
from recipe.engine import LLM, SamplingParams
from recipe.engine.kv_tiers.hit_split import HitSplit

ONE = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)


def rand(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(100, 49000, (n,), generator=g).tolist()


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def engine(args: argparse.Namespace, **config: Any) -> LLM:
    base: dict[str, Any] = {"num_threads": args.threads, "block_size": args.block_size,
                            "max_num_batched_tokens": args.batch_tokens, "kv_cache_bytes": args.pool_bytes}
    return LLM("smollm2", **{**base, **config})


# ----- trace ----------------------------------------------------------------------------------------------
def make_trace(seed: int, sessions: int) -> list[tuple[float, int, list[int], int]]:
    """[(arrival, session, new user tokens, output tokens)] in arrival order; sessions share system prompts."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    systems = {kind: [rand(g, int(rng.integers(1024, 2049))) for _ in range(2)] for kind in ("chat", "agent")}
    events, starts = [], []
    for s in range(sessions):
        kind = "agent" if s % 2 else "chat"
        system = systems[kind][int(rng.integers(0, 2))]
        t = float(rng.uniform(0, 30))
        starts.append((s, kind, system))
        for turn in range(int(rng.integers(3, 9))):
            user = rand(g, int(rng.integers(20, 120) if kind == "chat" else rng.integers(80, 300)))
            events.append((t, s, (system if turn == 0 else []) + user, int(rng.integers(8, 24))))
            t += float(rng.pareto(1.2) * 10 + 2)  # heavy-tailed think time
    events.sort(key=lambda e: e[0])
    return events


def replay(llm: LLM, trace: list[tuple[float, int, list[int], int]]) -> tuple[list[float], int, int, HitSplit]:
    """TTFTs, prompt tokens, cached tokens and the per-tier split of the measured first-token requests only
    (the request that generates the rest of each answer is not counted: its prompt is all cached)."""
    history: dict[int, list[int]] = {}
    ttfts, prompt_tokens, cached = [], 0, 0
    split = HitSplit(0, ())
    for _, s, new, out_len in trace:
        prompt = history.get(s, []) + new
        before = HitSplit.of(llm.engine.stats())
        t = time.perf_counter()
        out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))[0]
        ttfts.append(time.perf_counter() - t)
        turn = HitSplit.of(llm.engine.stats()) - before
        assert turn.prompt_tokens == len(prompt) and turn.cached_tokens == out.cached_tokens, turn
        was = dict(split.served)
        split = HitSplit(split.prompt_tokens + turn.prompt_tokens,
                         tuple((name, n + was.get(name, 0)) for name, n in turn.served))
        prompt_tokens += len(prompt)
        cached += out.cached_tokens
        rest = llm.generate([prompt + list(out.new_token_ids)],
                            SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True))[0]
        history[s] = prompt + list(out.new_token_ids) + list(rest.new_token_ids)
    return ttfts, prompt_tokens, cached, split


def bench_trace(args: argparse.Namespace) -> None:
    trace = make_trace(args.seed, args.sessions)
    kv_dir = Path(tempfile.mkdtemp(prefix="kvtiers-trace-"))
    try:
        results = {}
        for name, config in (("L1 only", {}),
                             ("L1+L2+L3", {"kv_host_bytes": args.host_bytes, "kv_dir": str(kv_dir)})):
            llm = engine(args, kv_cache_bytes=args.pool_bytes, **config)
            results[name] = replay(llm, trace)
            llm.shutdown()
        (t1, p1, c1, _), (t3, p3, c3, sp) = results["L1 only"], results["L1+L2+L3"]
        print(f"trace: {len(trace)} turns of {args.sessions} sessions, {p3} prompt tokens, device pool "
              f"{args.pool_bytes >> 20} MiB")
        print(f"  tokens served from cache: L1 only {c1 / p1:.1%}; with tiers {c3 / p3:.1%} "
              f"= L1 {sp.rate('device'):.1%} + L2 {sp.rate('host'):.1%} + L3 {sp.rate('disk'):.1%} of prompt "
              f"tokens (L2 served {sp.conditional('host'):.1%} of the tokens L1 missed, L3 "
              f"{sp.conditional('disk'):.1%} of those L2 missed); anchor DeepSeek 56.3%, goal >= 60%")
        print(f"  TTFT p50 {pct(t3, 50):.3f}s vs {pct(t1, 50):.3f}s -> {pct(t3, 50) / pct(t1, 50):.2f}x; "
              f"p90 {pct(t3, 90):.3f}s vs {pct(t1, 90):.3f}s -> {pct(t3, 90) / pct(t1, 90):.2f}x (tiers / L1 only)")
    finally:
        shutil.rmtree(kv_dir, ignore_errors=True)


# ----- restore ----------------------------------------------------------------------------------------------
def bench_restore(args: argparse.Namespace) -> None:
    g = torch.Generator().manual_seed(args.seed + 1)
    kv_dir = Path(tempfile.mkdtemp(prefix="kvtiers-restore-"))
    try:
        prompts = [rand(g, args.restore_tokens) for _ in range(args.repeats)]
        writer = engine(args, kv_dir=str(kv_dir))
        writer.generate(prompts, ONE)
        writer.shutdown()
        recompute = engine(args)
        recompute.generate([rand(g, 64)], ONE)  # warm-up
        restored, computed = [], []
        for p in prompts:
            reader = engine(args, kv_dir=str(kv_dir))  # empty pool: the prefix can only come from L3
            reader.generate([rand(g, 64)], ONE)  # warm-up
            t = time.perf_counter()
            out = reader.generate([p], ONE)[0]
            restored.append(time.perf_counter() - t)
            assert out.cached_tokens >= len(p) - 2 * args.block_size, out.cached_tokens
            reader.shutdown()
            t = time.perf_counter()
            recompute.generate([p], ONE)  # a fresh prompt: this engine has not seen it
            computed.append(time.perf_counter() - t)
        recompute.shutdown()
        r, c = statistics.median(restored), statistics.median(computed)
        print(f"restore: {args.restore_tokens}-token prompt TTFT restored from L3 {r:.3f}s vs computed {c:.3f}s "
              f"-> {r / c:.3f}x (goal <= 0.1x; medians of {args.repeats})")
    finally:
        shutil.rmtree(kv_dir, ignore_errors=True)


# ----- bandwidth --------------------------------------------------------------------------------------------
def bench_bandwidth(args: argparse.Namespace) -> None:
    g = torch.Generator().manual_seed(args.seed + 2)
    kv_dir = Path(tempfile.mkdtemp(prefix="kvtiers-bw-"))
    try:
        prompt = rand(g, args.restore_tokens)
        writer = engine(args, kv_dir=str(kv_dir))
        writer.generate([prompt], ONE)
        tier = writer.engine.kv_tiers.tiers[0]
        writer.engine.kv_tiers.flush()
        from recipe.engine.block_manager import chain_hash

        hashes, h = [], b""
        for i in range((len(prompt) - 1) // args.block_size):
            h = chain_hash(h, prompt[i * args.block_size:(i + 1) * args.block_size])
            hashes.append(h)
        files = [tier.path_of(x) for x in hashes]
        nbytes = sum(f.stat().st_size for f in files)
        tier_s, raw_s = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            got = tier.load(hashes)
            tier_s.append(time.perf_counter() - t)
            assert len(got) == len(hashes)
            t = time.perf_counter()
            for f in files:
                np.fromfile(f, dtype=np.uint8)
            raw_s.append(time.perf_counter() - t)
        writer.shutdown()
        a, b = nbytes / statistics.median(tier_s), nbytes / statistics.median(raw_s)
        print(f"bandwidth: L3 restore {a / 1e9:.2f} GB/s vs numpy.fromfile of the same {len(files)} files "
              f"{b / 1e9:.2f} GB/s -> {a / b:.2f}x (goal >= 0.5x; {nbytes >> 20} MiB, page cache)")
    finally:
        shutil.rmtree(kv_dir, ignore_errors=True)


# ----- overhead ---------------------------------------------------------------------------------------------
def bench_overhead(args: argparse.Namespace) -> None:
    g = torch.Generator().manual_seed(args.seed + 3)
    kv_dir = Path(tempfile.mkdtemp(prefix="kvtiers-cost-"))
    params = SamplingParams(temperature=0.0, max_tokens=args.out_tokens, ignore_eos=True)
    try:
        engines = {"off": engine(args), "on": engine(args, kv_host_bytes=args.host_bytes, kv_dir=str(kv_dir))}
        for llm in engines.values():
            llm.generate([rand(g, 64)], ONE)  # warm-up
        rates: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.repeats):
            for name in ("off", "on"):  # alternating, fresh prompts each time: nothing to restore
                prompts = [rand(g, args.overhead_tokens) for _ in range(args.overhead_requests)]
                t = time.perf_counter()
                outs = engines[name].generate(prompts, params)
                dt = time.perf_counter() - t
                rates[name].append(sum(len(p) + len(o.new_token_ids) for p, o in zip(prompts, outs, strict=True)) / dt)
        on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
        stats = engines["on"].engine.stats()
        for llm in engines.values():
            llm.shutdown()
        print(f"overhead: tokens/s with tiers on (nothing to restore) {on:.0f} vs off {off:.0f} -> {on / off:.3f}x "
              f"(goal >= 0.97x; restored {stats.restored_tokens} tokens)")
    finally:
        shutil.rmtree(kv_dir, ignore_errors=True)


# ----- unit -------------------------------------------------------------------------------------------------
def bench_unit(args: argparse.Namespace) -> None:
    from recipe.engine.kv_tiers import unit

    kv_bytes = 30 * 2 * 3 * 64 * args.block_size * 4  # one SmolLM2 fp32 block
    n, run = args.unit_blocks, 8
    rng = np.random.default_rng(args.seed)
    blocks = [rng.integers(0, 256, kv_bytes, dtype=np.uint8) for _ in range(n)]
    tokens = np.arange(args.block_size, dtype=np.int64)
    ns = b"n" * 16
    units = [unit.encode(ns, i.to_bytes(16, "little"), tokens, b, "chat", 0.0) for i, b in enumerate(blocks)]
    root = Path(tempfile.mkdtemp(prefix="kvtiers-unit-"))

    def write(path: Path, data: list[np.ndarray]) -> None:
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for d in data:
                f.write(d.data)
        os.replace(tmp, path)

    def read(path: Path) -> None:
        buf = np.fromfile(path, dtype=np.uint8)
        size = len(units[0])
        for k in range(len(buf) // size):  # verified as the tier verifies
            chunk = buf[k * size:(k + 1) * size]
            unit.decode(chunk, ns, unit.read_header(chunk).block_hash, kv_bytes)

    try:
        per, grouped = {"write": [], "read": []}, {"write": [], "read": []}  # type: ignore[var-annotated]
        for rep in range(args.repeats):
            d1, d2 = root / f"per{rep}", root / f"run{rep}"
            d1.mkdir()
            d2.mkdir()
            t = time.perf_counter()
            for i, u in enumerate(units):
                write(d1 / f"{i}.kv", [u])
            per["write"].append(time.perf_counter() - t)
            t = time.perf_counter()
            for k in range(0, n, run):
                write(d2 / f"{k}.kv", units[k:k + run])
            grouped["write"].append(time.perf_counter() - t)
            t = time.perf_counter()
            for i in range(n):
                read(d1 / f"{i}.kv")
            per["read"].append(time.perf_counter() - t)
            t = time.perf_counter()
            for k in range(0, n, run):
                read(d2 / f"{k}.kv")
            grouped["read"].append(time.perf_counter() - t)
        total = sum(len(u) for u in units)
        for op in ("write", "read"):
            a, b = total / statistics.median(per[op]), total / statistics.median(grouped[op])
            print(f"unit: {op} {n} blocks of {kv_bytes >> 10} KiB: one file per block {a / 1e9:.2f} GB/s vs one "
                  f"file per {run} blocks {b / 1e9:.2f} GB/s -> {a / b:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


SECTIONS = {"trace": bench_trace, "restore": bench_restore, "bandwidth": bench_bandwidth,
            "overhead": bench_overhead, "unit": bench_unit}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--pool-bytes", type=int, default=192 << 20, help="device pool of the trace (about 4K tokens)")
    p.add_argument("--host-bytes", type=int, default=512 << 20)
    p.add_argument("--restore-tokens", type=int, default=2048)
    p.add_argument("--overhead-requests", type=int, default=8)
    p.add_argument("--overhead-tokens", type=int, default=256)
    p.add_argument("--out-tokens", type=int, default=32)
    p.add_argument("--unit-blocks", type=int, default=128)
    args = p.parse_args()
    for name in args.only.split(","):
        if name not in SECTIONS:
            sys.exit(f"unknown section {name!r}; known: {', '.join(SECTIONS)}")
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
