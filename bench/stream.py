"""Stream processing cost: µs per output token and events per second, ours vs the official reference.

Both processors get the same backend updates (setup excluded; each event rendered to SSE bytes): one
token id per update, as an engine streams them, or text updates of a few characters. Workloads: "mixed"
is the stream differential generator's well-formed, marker-dense outputs (tests/stream/stream_differential.py:
thinking, DSML tool calls, stop sequences, JSON mode, special tokens, cases the reference accepts); "prose" is plain reasoning + answer text, the common serving case. All three APIs; each figure is the median of several repetitions
measured in this run, printed with its ratio to the reference (< 1 means cheaper than the reference).

Run: `.venv/bin/python bench/stream.py [--cases 60] [--repeats 5] [--clock wall|thread] [--workloads mixed/tokens,...]
[--pure-python] [--json PATH]`: the stream modules run compiled where `python -m recipe.compiled_stream` has built them for the
current sources (the last line says which), `--pure-python` times the interpreted ones.

Each timed region starts from a collected heap (`gc.collect()` after the setup), so a side pays for the
collections its own processing causes, not for collecting the setup's objects (thousands of update objects
and request models built just before; the reference's chunks are Rust objects the collector never sees).

`--clock thread` times per-thread CPU time (both processors run on the calling thread), for figures on a
loaded machine where wall time is mostly preemption.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROSE = ["the", "weather", "in", "Paris", "is", "sunny", "today,", "with", "a", "light", "breeze.", "Temperatures",
         "reach", "21", "degrees", "and", "数据", "résumé", "so", "plan", "accordingly.\n\n", "Then", "we", "can"]


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def ours_run(case: dict[str, Any], harness: Any, tok: Any) -> Any:
    """A closure feeding a new processor every update of `case` and rendering each event's SSE bytes."""
    from recipe.stream import StreamProcessor, responses_echo

    request = harness.recipe_request(case["api"], case["body"])
    fmt = "deepseek_v41" if request.model_version.name == "V41" else "deepseek_v4"
    echo = responses_echo(case["body"]) if case["api"] == "responses" else None
    updates = [harness.to_update(u) for u in case["updates"]]

    # built outside the timing, as the reference's processor is (both are used once)
    proc = StreamProcessor(case["api"], request, response_id="resp-1", model="m", tokenizer=tok,
                           output_format=fmt, created=1, echo=echo)

    def run() -> int:
        n = 0
        for update in updates:
            for event in proc.feed(update):
                event.sse()
                n += 1
            if proc.finished:
                break
        for event in proc.finish():
            event.sse()
            n += 1
        return n

    return run


def ref_run(case: dict[str, Any], dr: Any, ref_tok: Any) -> Any:
    """The same for the reference processor: push every chunk, render `event:`/`data:` frames."""
    req_cls = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest,
               "responses": dr.ResponsesRequest}[case["api"]]
    resp_cls = {"chat": dr.ChatCompletionResponse, "messages": dr.MessagesResponse,
                "responses": dr.ResponsesResponse}[case["api"]]
    reasons = {"stop": dr.InferenceFinishReason.Stop, "length": dr.InferenceFinishReason.Length,
               "content_filter": dr.InferenceFinishReason.ContentFilter}
    chunks = []
    for u in case["updates"]:
        if u["kind"] == "ready":
            chunks.append(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=u["prompt_tokens"])))
        elif u["kind"] == "text":
            chunks.append(dr.InferenceChunk.text(u["text"], u["token_count"]))
        elif u["kind"] == "tokens":
            chunks.append(dr.InferenceChunk.tokens(u["ids"]))
        else:
            chunks.append(dr.InferenceChunk.finish(reasons[u["reason"]]))
    bodies = [req_cls(case["body"]) for _ in range(1)]
    req = bodies[0]
    echo = req.echo() if case["api"] == "responses" else None
    cr = req.convert(dr.ConversionOptions())
    gen = req_cls.chunk_generator(cr, "resp-1", "m")
    if echo is not None:
        gen = gen.with_echo(echo)
    proc = dr.StreamProcessor(gen, cr.parsing_options, ref_tok)

    def render(item: Any) -> bytes:
        name = resp_cls.sse_event_name(item)
        head = f"event: {name}\n" if name else ""
        return (head + "data: " + item.to_json() + "\n\n").encode()

    def run() -> int:
        n = 0
        for chunk in chunks:
            for item in proc.push(chunk):
                render(item)
                n += 1
            if proc.finished:
                break
        for item in proc.finish():
            render(item)
            n += 1
        proc.close()
        return n

    return run


def _accepted(case: dict[str, Any], dr: Any) -> bool:
    """Whether the reference converts the case's request (rejected ones stream nothing to time)."""
    req_cls = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest,
               "responses": dr.ResponsesRequest}[case["api"]]
    try:
        req_cls(case["body"]).convert(dr.ConversionOptions())
    except Exception:
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="wall time, or this thread's CPU time (both processors run on it)")
    ap.add_argument("--apis", default="chat,messages,responses")
    ap.add_argument("--workloads", default="mixed/tokens,mixed/text,prose/tokens")
    ap.add_argument("--pure-python", action="store_true",
                    help="time the pure-Python stream modules even where the compiled ones are built")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write the ratios here (bench/results/stream.json feeds docs/performance.md)")
    args = ap.parse_args()
    from recipe import compiled_stream

    compiled_stream.use_compiled(not args.pure_python)
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    workloads = [tuple(w.split("/")) for w in args.workloads.split(",")]

    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer

    mt = _load("stream_differential", ROOT / "tests" / "stream" / "stream_differential.py")
    harness = _load("stream_harness", ROOT / "tests" / "stream" / "conftest.py")
    tok = load_deepseek_v4_tokenizer()
    ref_tok = dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path()))
    rng = random.Random(4242)

    ratios: dict[str, dict[str, float]] = {}
    print(f"{'api':<10}{'workload':<14}{'tokens':>8}{'events':>8}  {'ours µs/tok':>12}{'ref µs/tok':>12}{'ratio':>8}"
          f"  {'ours ev/s':>11}{'ref ev/s':>11}")
    for api in args.apis.split(","):
        cases: list[dict[str, Any]] = []
        i = 0
        while len(cases) < args.cases:
            case = mt.make_case(rng, i, broken=False, api=api)
            i += 1
            if _accepted(case, dr):
                case["explicit_finish"] = True
                cases.append(case)
        prose: list[dict[str, Any]] = []
        k = 0
        while len(prose) < args.cases:
            case = mt.make_case(random.Random(k), k, broken=False, api=api)
            k += 1
            case["explicit_finish"], case["finish"] = True, "stop"
            for key in ("stop", "stop_sequences", "response_format", "text", "tools", "tool_choice", "logprobs",
                        "top_logprobs"):
                case["body"].pop(key, None)
            if not _accepted(case, dr):
                continue
            words = " ".join(rng.choice(PROSE) for _ in range(200))
            case["output"] = (words[:400] + "</think>" + words) if "thinking" not in case["body"] and (
                api != "responses" or "reasoning" not in case["body"]) else words
            prose.append(case)
        for workload, feed in workloads:
            cases_now = cases if workload == "mixed" else prose
            prepared = []
            n_tokens = 0
            for case in cases_now:
                case["feed"] = feed
                case["logprobs"] = False
                upds = mt.updates(case, tok)
                if feed == "tokens":  # one id per update, as an engine streams
                    flat = [i for u in upds if u["kind"] == "tokens" for i in u["ids"]]
                    upds = [upds[0], *({"kind": "tokens", "ids": [i]} for i in flat), upds[-1]]
                    n_tokens += len(flat)
                else:
                    n_tokens += len(tok.full.encode(case["output"], add_special_tokens=False).ids)
                case["updates"] = upds
                prepared.append(case)
            ours_t, ref_t = [], []
            n_events = ref_events = 0
            for _ in range(args.repeats):
                runs = [ours_run(case, harness, tok) for case in prepared]  # setup outside the timing
                gc.collect()
                t0 = clock()
                n_events = sum(run() for run in runs)
                ours_t.append(clock() - t0)
                ref_runs = [ref_run(case, dr, ref_tok) for case in prepared]
                gc.collect()
                t0 = clock()
                ref_events = sum(run() for run in ref_runs)
                ref_t.append(clock() - t0)
            ours, ref = statistics.median(ours_t), statistics.median(ref_t)
            ratios.setdefault(f"{workload}/{feed}", {})[api] = ours / ref
            print(f"{api:<10}{workload + '/' + feed:<14}{n_tokens:>8}{n_events:>8}  {ours / n_tokens * 1e6:>12.2f}"
                  f"{ref / n_tokens * 1e6:>12.2f}{ours / ref:>8.2f}  {n_events / ours:>11.0f}{ref_events / ref:>11.0f}")
    print("ratio = ours / reference time for the same updates (medians of", args.repeats, "repeats, same run;",
          f"clock {args.clock})")
    print("stream modules:", "compiled (recipe.compiled_stream)" if compiled_stream.active() else "pure Python")
    print("timed: feeding every update and rendering each event's SSE bytes; request setup is outside the timing")
    if args.json:
        _write_json(args, ratios, compiled_stream.active())


def _write_json(args: argparse.Namespace, ratios: dict[str, dict[str, float]], compiled: bool) -> None:
    """The worst workload's ratio is the headline, in the form scripts/make_performance_doc.py reads."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_performance_doc import merge_result

    worst = max(r for per_api in ratios.values() for r in per_api.values())
    parts = "; ".join(f"{w}: " + " / ".join(f"{per_api[a]:.2f}×" for a in per_api) for w, per_api in ratios.items())
    command = f".venv/bin/python bench/stream.py --cases {args.cases} --repeats {args.repeats} --clock {args.clock}"
    merge_result(args.json, {
        "command": command + (" --pure-python" if args.pure_python else ""),
        "figure": f"{' / '.join(a.capitalize() for a in args.apis.split(','))}, {parts}; worst **{worst:.2f}×**"
                  f" ({'compiled' if compiled else 'pure-Python'} stream modules)",
        "headline": f"≤ {worst:.2f}× the reference's time",
        "status": "met" if worst <= 1.0 else "not met",
        "data": {"ratios": ratios, "compiled": compiled},
    })


if __name__ == "__main__":
    main()
