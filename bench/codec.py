"""Codec speed against the official reference: convert + render + encode per request, fresh bodies.

    .venv/bin/python bench/codec.py [--bodies 80] [--repeats 3] [--seed N] [--clock wall|process] [--json PATH]

Bodies come from the golden generator (`golden/make_vectors.py`) with a seed this process has not
used (random unless `--seed`), and every tool parameter schema gets a unique `description`, so no
body, tool list or schema has been seen before its first timed run. Only bodies the reference
converts to a V4 prompt are kept (the only version the bundled tokenizer encodes completely).

Per API it times, interleaved in one process (which side goes first alternates per body):
- cold: each body's FIRST conversion, Recipe's `convert` → `render` → `encode` against the
  reference's `XxxRequest(body).convert()` → `DeepseekV4Encoding.render_conversation` + `encode`;
- warm: the same bodies again, median of `--repeats` runs (Recipe's tool-schema and template
  caches now hit, as when an agent resends its tools).
It prints Recipe / reference as the ratio of total times and as the geometric mean of per-body
ratios, for all bodies and for bodies with tools. Below 1.0 means Recipe is faster. Warm-up runs on
other fresh bodies are excluded; the ids are checked equal to the reference's after timing (so the
check warms nothing that is timed). The reference is the dev-only dependency deepseek-recipe 0.2.0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

MAKE_VECTORS = Path(__file__).resolve().parents[1] / "golden" / "make_vectors.py"
APIS = ("chat", "messages", "responses")
SCHEMA_KEYS = ("parameters", "input_schema")


def _load_make_vectors() -> Any:
    spec = importlib.util.spec_from_file_location("make_vectors", MAKE_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _freshen(node: Any, nonce: list[int]) -> None:
    """Give every tool parameter schema in `node` a description no other schema has."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in SCHEMA_KEYS and isinstance(value, dict):
                nonce[0] += 1
                value["description"] = f"fresh schema {nonce[0]:x}-{os.getpid()}-{time.time_ns()}"
            _freshen(value, nonce)
    elif isinstance(node, list):
        for value in node:
            _freshen(value, nonce)


def fresh_bodies(mv: Any, api: str, count: int, seed: str, nonce: list[int]) -> list[str]:
    """`count` bodies the reference converts to a V4 prompt, each with never-seen tool schemas."""
    import random

    import deepseek_recipe as dr

    rng = random.Random(seed)
    cls = mv._REQUEST_CLASSES[api]
    options = dr.ConversionOptions()
    out: list[str] = []
    while len(out) < count:
        body = mv.GENERATORS[api](rng)
        _freshen(body, nonce)
        text = json.dumps(body, ensure_ascii=False)
        try:
            conv = cls(text).convert(options)
        except Exception:
            continue
        if conv.model_version == dr.ModelVersion.DeepseekV4Pro:
            out.append(text)
    return out


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bodies", type=int, default=80, help="fresh bodies per API")
    ap.add_argument("--repeats", type=int, default=3, help="warm runs per body (median)")
    ap.add_argument("--seed", default=None, help="generator seed (default: random)")
    ap.add_argument("--clock", choices=("wall", "process"), default="wall",
                    help="wall time, or CPU time of all the process's threads")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write the figures here (bench/results/codec.json feeds docs/performance.md)")
    args = ap.parse_args(argv)
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    import deepseek_recipe as dr

    from recipe.codec import convert, encode, render
    from recipe.tokenizer import deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer

    mv = _load_make_vectors()
    seed = args.seed if args.seed is not None else os.urandom(8).hex()
    tokenizer = load_deepseek_v4_tokenizer()
    ref_enc = dr.DeepseekV4Encoding().with_tokenizer(
        dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path()))
    )
    ref_classes = {
        "chat": dr.ChatCompletionRequest,
        "messages": dr.MessagesRequest,
        "responses": dr.ResponsesRequest,
    }
    options = dr.ConversionOptions()
    nonce = [0]
    cold_totals: dict[str, float] = {}
    warm_totals: dict[str, float] = {}

    def ours(api: str, body: str) -> float:
        t0 = clock()
        req = convert(api, body)
        render(req)
        encode(req, tokenizer)
        return clock() - t0

    def ref(api: str, body: str) -> float:
        t0 = clock()
        conv = ref_classes[api](body).convert(options).conversation
        ref_enc.render_conversation(conv)
        ref_enc.encode(conv)
        return clock() - t0

    print(f"seed {seed}; {args.bodies} fresh V4 bodies per API; warm: median of {args.repeats}; clock {args.clock}")
    print(f"{'api':<10} {'bodies':>6} {'tools':>5}  {'cold total':>10} {'cold geo':>8} {'tools cold':>10}  "
          f"{'warm total':>10} {'warm geo':>8}  {'Recipe ms':>9} {'ref ms':>7}")  # fmt: skip
    for api in APIS:
        for body in fresh_bodies(mv, api, 10, f"{seed}-warmup-{api}", nonce):  # warm-up, excluded
            ours(api, body)
            ref(api, body)
        bodies = fresh_bodies(mv, api, args.bodies, f"{seed}-{api}", nonce)
        cold: list[tuple[float, float]] = []
        for i, body in enumerate(bodies):
            if i % 2:
                r, o = ref(api, body), ours(api, body)
            else:
                o, r = ours(api, body), ref(api, body)
            cold.append((o, r))
        warm = [
            (
                statistics.median(ours(api, b) for _ in range(args.repeats)),
                statistics.median(ref(api, b) for _ in range(args.repeats)),
            )
            for b in bodies
        ]
        with_tools = [i for i, b in enumerate(bodies) if json.loads(b).get("tools")]
        for body in bodies:  # parity guard, after timing: a benchmark of different work would be meaningless
            conv = ref_classes[api](body).convert(options).conversation
            assert encode(convert(api, body), tokenizer) == ref_enc.encode(conv), body[:200]
        o_sum, r_sum = sum(o for o, _ in cold), sum(r for _, r in cold)
        cold_totals[api] = o_sum / r_sum
        warm_totals[api] = sum(o for o, _ in warm) / sum(r for _, r in warm)
        print(
            f"{api:<10} {len(bodies):>6} {len(with_tools):>5}  {o_sum / r_sum:>9.2f}x {_geomean([o / r for o, r in cold]):>7.2f}x "
            f"{_geomean([cold[i][0] / cold[i][1] for i in with_tools]):>9.2f}x  "
            f"{sum(o for o, _ in warm) / sum(r for _, r in warm):>9.2f}x {_geomean([o / r for o, r in warm]):>7.2f}x  "
            f"{o_sum / len(bodies) * 1e3:>9.2f} {r_sum / len(bodies) * 1e3:>7.2f}"
        )
    print(
        "ratios: Recipe / reference (below 1.0: Recipe faster); total = ratio of summed times, geo = geometric mean per body"
    )
    if args.json:
        _write_json(args, cold_totals, warm_totals)
    return 0


def _write_json(args: argparse.Namespace, cold: dict[str, float], warm: dict[str, float]) -> None:
    """One capability's latest figure, in the form scripts/make_performance_doc.py reads."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from make_performance_doc import merge_result

    names = " / ".join(api.capitalize() for api in APIS)
    cold_s = " / ".join(f"{cold[a]:.2f}×" for a in APIS)
    merge_result(args.json, {
        "command": f".venv/bin/python bench/codec.py --bodies {args.bodies} --repeats {args.repeats} --clock {args.clock}",
        "figure": f"cold total, {names}: **{cold_s}**; warm " + " / ".join(f"{warm[a]:.2f}×" for a in APIS),
        "headline": f"{min(cold.values()):.2f}–{max(cold.values()):.2f}× the reference's time",
        "status": "met" if max(cold.values()) <= 1.0 else "not met",
        "data": {"cold_total": cold, "warm_total": warm, "bodies": args.bodies, "clock": args.clock},
    })


if __name__ == "__main__":
    raise SystemExit(main())
