"""Speculative decoding benchmark (SmolLM2): output tok/s with speculation against the same engine without it.

    python bench/speculative.py                                   # small sizes, for a shared 2-core box
    python bench/speculative.py --tokens 128 --repeats 3          # longer outputs

Workloads (every timed round gets fresh prompts; within a round every configuration runs the same ones, so
ratios are paired; prefix caching is off on every engine, so no configuration reuses another's prefill):
  edit  rewrite a Python file of this repository with one change (rename its first function)
  chat  short chat questions
  json  answers constrained to a JSON schema
Every engine runs the same paths (`--decode-backend`, `--weight-format`, `--linear-backend`); with
`--decode-backend fused` a verify step of up to 64 tokens runs in the fused native step, which computes each
position as decoding it alone (the outputs then equal bit for bit); on this CPU a second position costs ~0.02-0.11
of a decode step (its products prefetch the weights) and each further one ~0.2, where the layered path's cost is
flat to ~5 positions and steep past them.
Configurations: no speculation (the engine's default, asynchronous scheduling on), the drafter with a fixed
k = 1..6, and k = auto (per sequence and step, from calibrated confidences and the start-up step cost model).
Also: no speculation with asynchronous scheduling off ("off (sync)"), and, when `--ks` names "auto-sync", auto
with `speculative_async` off (every speculative step synchronous, the switch's reference); "auto-by-n", auto with
`speculative_ngram_match_buckets` off (n-gram confidences keyed by the matched n alone, that switch's reference);
"auto-grid", auto with the earlier step cost (`speculative_cost_fit="grid"`, `speculative_cost_cells` off);
"auto-unfitted", auto with the learned cells' own factors (`speculative_cost_cells_fit` off).
Fairness: the configurations take turns within each round in an order that rotates from round to round (drift
and bursts of load hit every configuration alike, not always the last ones); one warm-up round per workload and
batch is excluded. `--interleave slice` pairs them more closely: an engine per configuration (each with its own
calibration), all given the round's requests at once and taking turns of `--slice` seconds of steps (each turn
drained before the next engine's), each timed over its own turns; on this VM, whose speed drifts by tens of
percent over seconds to minutes, it narrowed the paired auto-vs-fixed range from about -24%..+16% (request by
request) to about +2%..+14% on the edit workload. It compares different engines, though: in one run of four an
engine ran ~15% slower than its peers for the whole run ("off (sync)" at 0.85x in every round; identical engines
agreed within 3% in a probe right after), which pairing in time cannot remove. So the fixed-k and auto
configurations rotate over their engines (all built as auto, switched with `use_length`, so their calibrations
carry over between configurations as the request-mode engine's does): with `--repeats` a multiple of their number
each runs on every engine equally often. "off", "off (sync)" and the variants keep their own engines.
Figures: median over rounds of output tok/s; "ratio", the median of the paired per-round ratios (the round's
tok/s over the same round's no-speculation tok/s) and their range ("spread", min-max); the acceptance rate,
the mean accepted length (tokens per speculating sequence-step), the mean chosen k, "cpu ratio" (this process's
CPU seconds without speculation over the configuration's: less sensitive to other processes' load than tok/s)
and "same", whether every greedy output equalled the output without speculation. Each workload and batch ends
with the goal's figures: the best fixed k (highest median ratio) and auto against it, as the median of the
paired per-round ratios auto / best fixed k, in %, with their range.
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import time
from pathlib import Path
from typing import Any

from recipe.engine import LLM, SamplingParams

ROOT = Path(__file__).resolve().parent.parent
TOPICS = ["photosynthesis", "the water cycle", "binary search", "compound interest", "plate tectonics",
          "how vaccines work", "the French revolution", "recursion", "black holes", "supply and demand",
          "the immune system", "hash tables", "climate change", "the printing press", "neural networks",
          "volcanoes", "the stock market", "DNA replication", "the Roman empire", "electric cars",
          "gravity", "sorting algorithms", "the moon landing", "coffee brewing", "jazz music", "bees",
          "the internet", "solar panels", "chess openings", "rainbows", "glaciers", "the human heart"]
JOBS = ["baker", "pilot", "nurse", "teacher", "farmer", "chef", "painter", "engineer", "doctor", "writer",
        "plumber", "sailor", "miner", "judge", "tailor", "dancer", "poet", "banker", "coach", "guard",
        "barber", "mason", "driver", "singer", "potter", "weaver", "hunter", "clerk", "actor", "smith"]
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
    "skills": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "city", "skills"]}


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def edit_prompts() -> list[str]:
    """One per Python file with a function: rewrite the file's first 40 lines, renaming that function."""
    out = []
    for path in sorted(ROOT.glob("*/*.py")) + sorted(ROOT.glob("*/*/*.py")):
        if ".venv" in path.parts or "tests" in path.parts:  # tests/ is the draft head's training text
            continue
        text = "\n".join(path.read_text().splitlines()[:40])
        m = re.search(r"^def (\w+)\(", text, re.M)
        if m:
            out.append(chat(f"Rewrite this Python file, renaming the function {m.group(1)} to "
                            f"{m.group(1)}_v2 everywhere. Output the whole file and nothing else.\n\n{text}"))
    return out


def workloads(tokenizer: Any) -> dict[str, tuple[list[str], Any]]:
    from recipe.constraints import compile_constraint

    json_prompts = [chat(f"Describe a fictional {j} as a JSON object with name, age, city and skills.")
                    for j in JOBS]
    return {"edit": (edit_prompts(), None),
            "chat": ([chat(f"Explain {t} in a few sentences.") for t in TOPICS], None),
            "json": (json_prompts, compile_constraint("json_schema", SCHEMA, tokenizer, timeout_s=300))}


def run(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> tuple[float, int, list[tuple[int, ...]]]:
    """(wall seconds, output tokens, outputs); the process's CPU seconds go to `CPU_SECONDS[-1]`."""
    t, c = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, params)
    seconds = time.perf_counter() - t
    CPU_SECONDS.append(time.process_time() - c)
    return seconds, sum(len(o.new_token_ids) for o in outs), [o.new_token_ids for o in outs]


CPU_SECONDS: list[float] = []  # per `run`: CPU time of this process (all threads), less sensitive to others' load
ROUND_IDS = itertools.count()


def run_sliced(llms: dict[str, LLM], order: list[str], prompts: list[list[int]], params: SamplingParams,
               slice_s: float) -> dict[str, tuple[float, int, list[tuple[int, ...]], float]]:
    """Every configuration's engine runs the same requests, the engines taking turns of about `slice_s` seconds
    of steps each (in `order`), so that the machine's drift in speed over seconds reaches them alike.

    A turn ends with the engine's steps in flight drained, so no engine computes during another's turn.
    Per configuration: (seconds of its own turns, output tokens, outputs in prompt order, CPU seconds of the
    process during its turns)."""
    tag = next(ROUND_IDS)
    ids = {key: [f"r{tag}-{i}" for i in range(len(prompts))] for key in order}
    tokens: dict[str, dict[str, list[int]]] = {key: {rid: [] for rid in ids[key]} for key in order}
    busy, cpu = dict.fromkeys(order, 0.0), dict.fromkeys(order, 0.0)
    for key in order:
        for rid, prompt in zip(ids[key], prompts, strict=True):
            llms[key].engine.add_request(rid, prompt, params)
    live = list(order)
    while live:
        for key in list(live):
            engine = llms[key].engine
            t, c = time.perf_counter(), time.process_time()
            while engine.has_unfinished_requests() and time.perf_counter() - t < slice_s:
                for out in engine.step():
                    tokens[key][out.request_id].extend(out.new_token_ids)
            for out in engine.drain():
                tokens[key][out.request_id].extend(out.new_token_ids)
            busy[key] += time.perf_counter() - t
            cpu[key] += time.process_time() - c
            if not engine.has_unfinished_requests():
                live.remove(key)
    return {key: (busy[key], sum(len(v) for v in tokens[key].values()),
                  [tuple(tokens[key][rid]) for rid in ids[key]], cpu[key]) for key in order}


def verify_steps(threads: int, context: int, repeats: int, weight_format: str) -> None:
    """One verify step of q positions (batch 1, `context` tokens before it) against a decode step (q = 1), per
    backend: the fastest of `repeats` runs in CPU time of the model thread (on a shared machine its wall time
    mostly measures the other processes; the fused step's second thread is counted by its wall time below)."""
    from recipe.engine.probe_step import probe_step

    queries = (1, 2, 3, 5, 8, 12, 17)
    for decode, linear in (("layers", "torch"), ("layers", "few-rows"), ("fused", "few-rows")):
        llm = LLM("smollm2", num_threads=threads, enable_prefix_caching=False, kv_cache_bytes=256 << 20,
                  linear_backend=linear, decode_backend=decode, weight_format=weight_format)
        runner, model_thread = llm.engine.runner, llm.engine._executor
        assert model_thread is not None
        steps = {q: probe_step(runner, 1, q, context) for q in queries}
        best = dict.fromkeys(queries, float("inf"))
        wall = dict.fromkeys(queries, float("inf"))
        for _ in range(repeats):
            for q, step in steps.items():
                def timed(step: Any = step, runner: Any = runner) -> tuple[float, float]:
                    t, w = time.thread_time(), time.perf_counter()
                    runner.execute(step)
                    return time.thread_time() - t, time.perf_counter() - w

                cpu, seconds = model_thread.submit(timed).result()
                best[q], wall[q] = min(best[q], cpu), min(wall[q], seconds)
        print(f"verify step, {weight_format}, decode_backend={decode}, linear_backend={linear}, context {context}: "
              + ", ".join(f"{q} position(s) {wall[q] * 1e3:.1f} ms wall ({wall[q] / wall[1]:.2f}x), "
                          f"{best[q] * 1e3:.1f} ms cpu ({best[q] / best[1]:.2f}x)" for q in queries),
              flush=True)
        llm.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=32, help="max output tokens per request")
    ap.add_argument("--drafter", default="ngram", choices=("ngram", "draft-head"))
    ap.add_argument("--batches", default="1,8", help="concurrent requests")
    ap.add_argument("--workloads", default="edit,chat,json")
    ap.add_argument("--ks", default="1,2,3,4,5,6,auto", help="speculation configurations: fixed k, auto, auto-sync "
                    "(auto, every step synchronous), auto-by-n (auto, n-gram confidences keyed by the matched n "
                    "alone: speculative_ngram_match_buckets off), auto-grid (auto, the earlier step cost: "
                    "speculative_cost_fit=grid, speculative_cost_cells off), auto-unfitted (auto, the learned cells "
                    "unfitted: speculative_cost_cells_fit off); the last three with --interleave slice")
    ap.add_argument("--repeats", type=int, default=1, help="timed rounds (fresh prompts each)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--linear-backend", default="few-rows", choices=("torch", "few-rows"),
                    help="EngineConfig.linear_backend of every engine (few-rows: verify steps of k+1 rows cost "
                         "about one row's time)")
    ap.add_argument("--decode-backend", default="layers", choices=("layers", "fused"),
                    help="EngineConfig.decode_backend of every engine (fused: decode and verify steps of up to "
                         "64 tokens run every layer in one native call)")
    ap.add_argument("--weight-format", default="dtype", help="EngineConfig.weight_format of every engine")
    ap.add_argument("--cost-fit", default="convex", choices=("convex", "grid", "plane"),
                    help="EngineConfig.speculative_cost_fit of the speculative engine (auto's step cost model)")
    ap.add_argument("--draft-vocab", default="reduced", choices=("reduced", "full"),
                    help="EngineConfig.speculative_draft_vocab (draft-head: the head's frequency-ranked vocabulary)")
    ap.add_argument("--interleave", default="request", choices=("request", "slice"),
                    help="request: configurations take turns request by request on one speculative engine whose "
                         "draft length is switched; slice: an engine per configuration, all running the round's "
                         "requests at once and taking turns of --slice seconds of steps (paired at a finer grain)")
    ap.add_argument("--slice", type=float, default=0.25, help="seconds of steps per turn with --interleave slice")
    ap.add_argument("--only", choices=("speed", "verify-step"), default="speed",
                    help="verify-step: time one verify step of q positions against a decode step instead")
    args = ap.parse_args()
    if args.only == "verify-step":
        verify_steps(args.threads, context=600, repeats=max(args.repeats, 6), weight_format=args.weight_format)
        return
    base = {"num_threads": args.threads, "enable_prefix_caching": False, "max_num_batched_tokens": 2048,
            "kv_cache_bytes": 256 << 20, "linear_backend": args.linear_backend,
            "decode_backend": args.decode_backend, "weight_format": args.weight_format}
    off = LLM("smollm2", **base)
    sync = LLM("smollm2", async_scheduling=False, **base)
    spec_config = {"speculative": args.drafter, "speculative_cost_fit": args.cost_fit,
                   "speculative_draft_vocab": args.draft_vocab, **base}
    spec = LLM("smollm2", num_speculative_tokens="auto", **spec_config)
    print(f"step cost model (profiled at start-up): {spec.engine.speculator.cost}")
    overlap = spec.engine.async_scheduling
    variants = {"auto-sync": {"speculative_async": False}, "auto-by-n": {"speculative_ngram_match_buckets": False},
                "auto-grid": {"speculative_cost_fit": "grid", "speculative_cost_cells": False},
                "auto-unfitted": {"speculative_cost_cells_fit": False}}
    ks: list[int | str] = [k if k == "auto" or k in variants else int(k) for k in args.ks.split(",")]
    sliced: dict[str, LLM] = {}  # --interleave slice: an engine per configuration
    rotating: list[str] = []  # fixed k and auto: their engines swap configurations from round to round
    if args.interleave == "slice":
        sliced = {"off": off, "off (sync)": sync}
        rotating = [f"k={k}" for k in ks if k == "auto" or isinstance(k, int)]
        for i, key in enumerate(rotating):
            sliced[key] = spec if i == 0 else LLM("smollm2", num_speculative_tokens="auto", **spec_config)
        for k in ks:
            variant = variants.get(str(k))
            if variant is not None:
                sliced[f"k={k}"] = LLM("smollm2", num_speculative_tokens="auto", **spec_config | variant)
    elif any(k in ks for k in ("auto-by-n", "auto-grid", "auto-unfitted")):
        ap.error("auto-by-n, auto-grid and auto-unfitted need --interleave slice (an engine of its own)")
    tok = spec.tokenizer
    loads = workloads(tok)
    for name in args.workloads.split(","):
        texts, constraint = loads[name]
        params = SamplingParams(temperature=0.0, max_tokens=args.tokens, constraint=constraint)
        pool = itertools.cycle(texts)
        for batch in (int(b) for b in args.batches.split(",")):
            def fresh(b: int = batch, source: Any = pool) -> list[list[int]]:
                return [spec.encode(next(source)) for _ in range(b)]

            configs: list[str] = ["off", "off (sync)", *(f"k={k}" for k in ks)]
            rates: dict[str, list[float]] = {key: [] for key in configs}
            cpus: dict[str, list[float]] = {key: [] for key in configs}
            outputs: dict[str, list[Any]] = {key: [] for key in configs}
            stats: dict[str, list[Any]] = {}
            for r in range(args.repeats + 1):  # round 0: warm-up (excluded); it also starts the calibration
                prompts = fresh()
                shift = r % len(configs)
                order = configs[shift:] + configs[:shift]  # every round another configuration goes first
                if sliced:
                    # round r runs rotating configuration i on the engine of configuration i + r: over as many
                    # rounds as there are such engines each runs on each, so no engine's own speed favours one
                    engines = dict(sliced)
                    for i, key in enumerate(rotating):
                        engines[key] = sliced[rotating[(i + r) % len(rotating)]]
                        engines[key].engine.speculator.use_length(key[2:])  # "auto" or a fixed k
                    befores = {key: engines[key].engine.stats().speculative for key in configs}
                    results = run_sliced(engines, order, prompts, params, args.slice)
                    if r == 0:
                        continue
                    for key in configs:
                        seconds, n, outs, cpu = results[key]
                        rates[key].append(n / seconds)
                        cpus[key].append(cpu)
                        outputs[key].append(outs)
                        if befores[key] is not None:
                            stats.setdefault(key, []).append((befores[key], engines[key].engine.stats().speculative))
                    continue
                for key in order:
                    llm, k = {"off": (off, None), "off (sync)": (sync, None)}.get(key, (spec, key[2:]))
                    if k is not None:
                        spec.engine.speculator.use_length("auto" if k == "auto-sync" else k)
                        # "auto-sync": the engine as speculative_async=False makes it (the switch's reference)
                        spec.engine.async_scheduling = overlap and k != "auto-sync"
                        before = spec.engine.stats().speculative
                    seconds, n, outs = run(llm, prompts, params)
                    spec.engine.async_scheduling = overlap
                    if r == 0:
                        continue
                    rates[key].append(n / seconds)
                    cpus[key].append(CPU_SECONDS[-1])
                    outputs[key].append(outs)
                    if k is not None:
                        stats.setdefault(key, []).append((before, spec.engine.stats().speculative))
            ratios = {key: [x / o for x, o in zip(rates[key], rates["off"], strict=True)] for key in configs}
            print(f"\n{name}, batch {batch}, {args.drafter} ({args.tokens} tokens max, {args.repeats} round(s), "
                  f"order rotated per round):")
            print(f"  {'config':<12}{'tok/s':>8}{'ratio':>8}{'spread':>13}{'accept':>8}{'mean len':>10}{'mean k':>8}"
                  f"{'cpu ratio':>10}  same")
            for key in configs:
                lo, hi = min(ratios[key]), max(ratios[key])
                line = f"  {key:<12}{statistics.median(rates[key]):8.2f}{statistics.median(ratios[key]):8.2f}"
                line += f"{f'{lo:.2f}-{hi:.2f}':>13}"
                if key in stats:
                    d, a, acc, hist = 0, 0, 0, {}
                    for before, after in stats[key]:
                        d += after.drafts - before.drafts
                        a += after.draft_tokens - before.draft_tokens
                        acc += after.accepted_tokens - before.accepted_tokens
                        for kk, c in after.length_histogram.items():
                            hist[kk] = hist.get(kk, 0) + c - before.length_histogram.get(kk, 0)
                    chosen = sum(kk * c for kk, c in hist.items()) / max(1, sum(hist.values()))
                    cpu = statistics.median(o / c for o, c in zip(cpus["off"], cpus[key], strict=True))
                    same = outputs[key] == outputs["off"]
                    line += f"{acc / max(a, 1):8.2f}{1 + acc / max(d, 1):10.2f}{chosen:8.2f}{cpu:10.2f}  {same}"
                print(line, flush=True)
            fixed = [key for key in configs if key[2:].isdigit()]
            for auto in ("k=auto", *(f"k={v}" for v in variants)):
                if fixed and auto in configs:
                    best = max(fixed, key=lambda key: statistics.median(ratios[key]))
                    paired = [x / y - 1 for x, y in zip(rates[auto], rates[best], strict=True)]
                    print(f"  {auto[2:]} vs best fixed {best} ({statistics.median(ratios[best]):.2f}x): "
                          f"{statistics.median(paired):+.1%} (paired per round, {min(paired):+.1%} to "
                          f"{max(paired):+.1%})", flush=True)
            for v in variants:
                if "k=auto" in configs and f"k={v}" in configs:
                    paired = [x / y - 1 for x, y in zip(rates["k=auto"], rates[f"k={v}"], strict=True)]
                    print(f"  auto vs {v}: {statistics.median(paired):+.1%} (paired per round, "
                          f"{min(paired):+.1%} to {max(paired):+.1%})", flush=True)
    for llm in {id(x): x for x in (off, sync, spec, *sliced.values())}.values():
        llm.shutdown()


if __name__ == "__main__":
    main()
