"""Sliding-window session cache benchmark (DeepSeek-V4): a tiny random V4 with the real window (128) and
compression rates (4 and 128), four layers, every figure against its anchor measured in the same run.

    python bench/swa_sessions.py                          # every section
    python bench/swa_sessions.py --only trace,divergence  # a subset

Sections:
  trace       a seeded agent/chat trace (shared system prompts, 3-8 turns, Pareto think times: many returns
              within 180 s, some beyond) replayed in arrival order on the session cache's simulated clock:
              the window-cache hit rate of returns within 180 s, replay tokens per miss against the full
              recompute length, and persisted bytes per session against persisting the window every token
  ttft        TTFT of a returning turn at --context tokens on a window miss (bounded replay of window + margin,
              and the exact margin), on a session-cache hit, and with the whole prompt recomputed (prefix
              cache off): fresh histories per timed run, medians
  divergence  the bounded replay's error: over seeded sessions, the logits of --check teacher-forced tokens
              after a window miss rebuilt with a replay of window + margin against an uninterrupted run
              (max |logit difference| and top-1 agreement), for margins exact, 12 (DeepInfer's 140) and 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine" / "models"))
from recipe.engine import LLM, SamplingParams
from v4_checkpoints import CSA, HCA, PATTERNS, write_v4_checkpoint

ONE = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
TTL = 180.0
PATTERNS["bench"] = dict(num_hidden_layers=4, sliding_window=128, max_position_embeddings=16384,
                         compress_rates={CSA: 4, HCA: 128}, index_topk=16)


class SimClock:
    """The trace's simulated time, injected into the session cache."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def rand(g: torch.Generator, n: int) -> list[int]:
    return torch.randint(2, 96, (n,), generator=g).tolist()


def engine(path: Path, args: argparse.Namespace, **config: Any) -> LLM:
    base: dict[str, Any] = {"block_size": 16, "num_kv_blocks": args.blocks, "max_num_batched_tokens": 1024,
                            "num_threads": args.threads}
    return LLM(str(path), **{**base, **config})


def sessions_on(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    return {"swa_session_bytes": args.session_bytes, "swa_replay_margin": args.margin, **extra}


# ----- trace ----------------------------------------------------------------------------------------------
def make_trace(seed: int, sessions: int) -> list[tuple[float, int, list[int], int, float]]:
    """[(arrival s, session, new tokens, output tokens, think time before it)] in arrival order."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    systems = {kind: rand(g, int(rng.integers(256, 640))) for kind in ("chat", "agent")}
    events = []
    for s in range(sessions):
        kind = "agent" if s % 2 else "chat"
        t, gap = float(rng.uniform(0, 60)), 0.0
        for turn in range(int(rng.integers(3, 9))):
            user = rand(g, int(rng.integers(20, 120) if kind == "chat" else rng.integers(60, 240)))
            events.append((t, s, (systems[kind] if turn == 0 else []) + user, int(rng.integers(8, 32)), gap))
            gap = float(rng.pareto(1.1) * 25 + 5)  # heavy-tailed think time: median ~23 s, some beyond 180 s
            t += gap
    events.sort(key=lambda e: e[0])
    return events


# capability id -> this run's fields for bench/results/<id>.json (written with --json DIR)
FIGURES: dict[str, dict[str, Any]] = {}


def bench_trace(path: Path, args: argparse.Namespace) -> None:
    trace = make_trace(args.seed, args.sessions)
    clock = SimClock()
    llm = engine(path, args, **sessions_on(args))
    sessions = llm.engine.swa_sessions
    sessions.cache.clock = clock
    history: dict[int, list[int]] = {}
    within = {"hit": 0, "miss": 0, "none": 0}
    beyond = {"hit": 0, "miss": 0, "none": 0}
    replay_tokens: list[int] = []
    recompute_tokens: list[int] = []
    try:
        for arrival, s, new, out_len, gap in trace:
            clock.now = arrival
            prompt = history.get(s, []) + new
            before = llm.engine.stats().swa_sessions
            out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True))[0]
            after = llm.engine.stats().swa_sessions
            history[s] = prompt + list(out.new_token_ids)
            if gap > 0:  # a return
                bucket = within if gap <= TTL else beyond
                if after.hits > before.hits:
                    bucket["hit"] += 1
                elif after.misses > before.misses:
                    bucket["miss"] += 1
                    replay_tokens.append(after.replay_tokens - before.replay_tokens)
                    recompute_tokens.append(len(prompt))
                else:
                    bucket["none"] += 1  # no compressed prefix to continue from (or the window still live)
        stats = llm.engine.stats().swa_sessions
    finally:
        llm.shutdown()
    n = args.sessions
    print(f"trace: {len(trace)} turns of {n} sessions, {sum(within.values())} returns within {TTL:.0f} s, "
          f"{sum(beyond.values())} beyond (think times Pareto(1.1) x 25 s + 5 s, simulated clock)")
    w = within["hit"] + within["miss"]
    print(f"  window-cache hit rate, returns within {TTL:.0f} s: {within['hit']}/{w} = "
          f"{within['hit'] / max(w, 1):.1%} (goal > 98%); beyond: {beyond['hit']} hits, {beyond['miss']} misses; "
          f"returns with nothing to continue from: {within['none'] + beyond['none']}")
    if replay_tokens:
        r, c = statistics.mean(replay_tokens), statistics.mean(recompute_tokens)
        print(f"  replay tokens per miss {r:.0f} vs full recompute {c:.0f} tokens -> {r / c:.3f}x "
              f"(margin {'exact' if args.margin is None else args.margin}, {len(replay_tokens)} misses)")
    per_state = sessions.rows * llm_row_bytes(sessions)
    every_token = per_state * sum(len(h) for h in history.values())  # a state at every position
    print(f"  persisted window bytes per session {stats.stored_bytes / n / 1024:.0f} KiB (a state every "
          f"{sessions.grain} tokens) vs the window persisted at every token {every_token / n / 1024:.0f} KiB -> "
          f"{stats.stored_bytes / every_token:.4f}x; held at the end {stats.bytes_held >> 10} KiB in "
          f"{stats.entries} states, {stats.expired} expired")
    hit_rate = within["hit"] / max(w, 1)
    replay = (f"; replay per miss **{statistics.mean(replay_tokens) / statistics.mean(recompute_tokens):.3f}×** the "
              f"full recompute ({statistics.mean(replay_tokens):.0f} vs {statistics.mean(recompute_tokens):,.0f} tokens)"
              if replay_tokens else "")
    FIGURES["swa_trace"] = {
        "command": f".venv/bin/python bench/swa_sessions.py --only trace --sessions {n}",
        "figure": f"**{hit_rate:.0%}** ({within['hit']}/{w} returns within {TTL:.0f} s hit){replay}; persisted window "
                  f"bytes **{stats.stored_bytes / every_token:.4f}×** persisting at every token",
        "headline": f"{hit_rate:.0%} hits within the TTL", "status": "met" if hit_rate > 0.98 else "not met",
        "data": {"within": dict(within), "beyond": dict(beyond), "stored_bytes": stats.stored_bytes},
    }


def llm_row_bytes(sessions: Any) -> int:
    flat = sessions._flat
    return flat.shape[1] * flat.element_size()


# ----- ttft -------------------------------------------------------------------------------------------------
def bench_ttft(path: Path, args: argparse.Namespace) -> None:
    g = torch.Generator().manual_seed(args.seed + 1)
    clock = SimClock()
    engines = {"bounded": engine(path, args, **sessions_on(args, swa_replay_margin=12)),
               "exact": engine(path, args, **sessions_on(args, swa_replay_margin=None)),
               "hit": engine(path, args, **sessions_on(args)),
               "recompute": engine(path, args, enable_prefix_caching=False)}
    for name in ("bounded", "exact", "hit"):
        engines[name].engine.swa_sessions.cache.clock = clock
    times: dict[str, list[float]] = {k: [] for k in engines}
    replays: dict[str, int] = {}
    try:
        for llm in engines.values():
            llm.generate([rand(g, 64)], ONE)  # warm-up
        for _ in range(args.repeats):
            history = rand(g, args.context)
            turn = history + rand(g, 32)
            for name, llm in engines.items():
                if name != "recompute":
                    clock.now += 1.0
                    llm.generate([history], ONE)  # the session's earlier turns (not timed)
                    clock.now += 10.0 if name == "hit" else TTL + 1  # a return within / beyond the TTL
                before = llm.engine.stats().swa_sessions
                t = time.perf_counter()
                llm.generate([turn], ONE)
                times[name].append(time.perf_counter() - t)
                after = llm.engine.stats().swa_sessions
                if after is not None:
                    replays[name] = after.replay_tokens - before.replay_tokens
                    assert (after.hits > before.hits) == (name == "hit"), name
    finally:
        for llm in engines.values():
            llm.shutdown()
    m = {k: statistics.median(v) for k, v in times.items()}
    base = m["recompute"]
    print(f"ttft: returning turn at {args.context} + 32 tokens, medians of {args.repeats} (fresh histories):")
    print(f"  miss, bounded replay ({replays['bounded']} tokens) {m['bounded']:.3f}s vs full recompute "
          f"{base:.3f}s -> {m['bounded'] / base:.3f}x (goal <= 0.2x)")
    print(f"  miss, exact replay ({replays['exact']} tokens) {m['exact']:.3f}s -> {m['exact'] / base:.3f}x; "
          f"session-cache hit {m['hit']:.3f}s -> {m['hit'] / base:.3f}x")
    FIGURES["swa_ttft"] = {
        "command": f".venv/bin/python bench/swa_sessions.py --only ttft --context {args.context} --repeats {args.repeats}",
        "figure": f"**{m['bounded'] / base:.3f}×** ({m['bounded']:.2f} vs {base:.1f} s; {replays['bounded']} tokens "
                  f"replayed); exact margin {m['exact'] / base:.3f}×; session-cache hit {m['hit'] / base:.3f}×",
        "status": "met" if m["bounded"] / base <= 0.2 else "not met",
        "data": {"seconds": m, "replay_tokens": replays},
    }


# ----- divergence -------------------------------------------------------------------------------------------
def bench_divergence(path: Path, args: argparse.Namespace) -> None:
    import json

    from recipe.engine.layers.v4_kv import RELEASED, V4Plan, V4Span
    from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
    from recipe.engine.models.deepseek_v4_config import DeepseekV4Config
    from recipe.engine.models.safetensors_loader import SafetensorsCheckpoint
    from recipe.engine.session_cache import replay_tokens

    bs, per = 16, 64
    model = DeepseekV4ForCausalLM(DeepseekV4Config.from_hf(json.loads((path / "config.json").read_text())))
    model.load_weights(SafetensorsCheckpoint(path))
    model.eval()
    model.allocate_kv_cache(4 * per, bs, torch.float32, "cpu")
    kinds = [s.name for s in model.cache_specs()]

    def tables(slot: int) -> dict[str, torch.Tensor]:
        return {k: torch.arange(slot * per, (slot + 1) * per) for k in kinds}

    @torch.inference_mode()
    def run(ids: list[int], p0: int, p1: int, t: dict[str, torch.Tensor], wf: int = 0, cu: int = 0) -> torch.Tensor:
        hidden = model(torch.tensor(ids[p0:p1]), torch.arange(p0, p1), V4Plan((V4Span(0, p1 - p0, p0, t, wf, cu),), bs))
        return model.compute_logits(hidden)

    g = torch.Generator().manual_seed(args.seed + 2)
    point, margins = 640, (None, 12, 0)
    results: dict[Any, tuple[float, int, int]] = {m: (0.0, 0, 0) for m in margins}
    for _ in range(args.divergence_sessions):
        ids = rand(g, point + args.check)
        whole = torch.cat([run(ids, p, min(p + 256, len(ids)), tables(0)) for p in range(0, len(ids), 256)])[point:]
        run(ids, 0, point, tables(1))  # the history: its compressed entries survive the miss
        for m in margins:
            r = replay_tokens(model, m, bs)
            window = torch.arange(2 * per, 3 * per)
            window[: (point - r) // bs] = RELEASED
            t = {**tables(1), "window": window}
            got = run(ids, point - r, len(ids), t, point - r, point)[r:]
            d, agree, n = results[m]
            results[m] = (max(d, (got - whole).abs().max().item()),
                          agree + int((got.argmax(-1) == whole.argmax(-1)).sum()), n + len(got))
    print(f"divergence: {args.divergence_sessions} seeded sessions, window miss at {point}, {args.check} "
          f"teacher-forced tokens after it, against an uninterrupted run:")
    for m in margins:
        d, agree, n = results[m]
        name = f"exact ({replay_tokens(model, None, bs)} tokens)" if m is None else \
            f"window + {m} ({replay_tokens(model, m, bs)} tokens)"
        print(f"  replay {name}: max |logit diff| {d:.2e}, top-1 agreement {agree}/{n} = {agree / n:.1%}")


SECTIONS = {"trace": bench_trace, "ttft": bench_ttft, "divergence": bench_divergence}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sessions", type=int, default=12)
    p.add_argument("--blocks", type=int, default=2048, help="device pool blocks of 16 tokens (every kind)")
    p.add_argument("--session-bytes", type=int, default=256 << 20)
    p.add_argument("--margin", type=int, default=12, help="replay window + MARGIN tokens on a miss (trace)")
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--divergence-sessions", type=int, default=8)
    p.add_argument("--check", type=int, default=64)
    p.add_argument("--json", default=None, metavar="DIR",
                   help="also write each section's figure to DIR/<capability>.json (bench/results feeds "
                        "docs/performance.md)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_v4_checkpoint(Path(tmp), "bench", seed=args.seed)
        for name in args.only.split(","):
            if name not in SECTIONS:
                sys.exit(f"unknown section {name!r}; known: {', '.join(SECTIONS)}")
            SECTIONS[name](path, args)
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
        from make_performance_doc import merge_result

        for capability, fields in FIGURES.items():
            merge_result(Path(args.json) / f"{capability}.json", fields)


if __name__ == "__main__":
    main()
