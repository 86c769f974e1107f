"""Codec speed against the official reference: convert + render + encode per request, golden set.

    .venv/bin/python bench/codec.py [--repeats 5] [--limit N]

For every converted golden request (V4 model: the only version the bundled tokenizer encodes
completely) it times Recipe's `convert` → `render` → `encode` and the reference's
`XxxRequest(body).convert()` → `DeepseekV4Encoding.render_conversation` + `encode`, each the median
of `--repeats` runs, interleaved in the same process. It prints the ratio Recipe / reference as a
geometric mean over cases, separately for requests with tools, and for convert alone. Below 1.0 means
Recipe is faster. The reference is the dev-only dependency deepseek-recipe 0.2.0.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "requests.jsonl.gz"


def _median_time(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--limit", type=int, default=0, help="at most this many cases (0: all)")
    args = ap.parse_args(argv)

    import deepseek_recipe as dr

    from recipe.codec import convert, encode, render
    from recipe.tokenizer import deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer

    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        cases = [json.loads(line) for line in f]
    cases = [c for c in cases if "error" not in c and c["model_version"] == "V4"]
    if args.limit:
        cases = cases[: args.limit]

    tokenizer = load_deepseek_v4_tokenizer()
    ref_enc = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path())))
    ref_classes = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest, "responses": dr.ResponsesRequest}
    options = dr.ConversionOptions()

    full: list[float] = []
    full_tools: list[float] = []
    conv_only: list[float] = []
    for case in cases:
        api, body = case["api"], case["request"]
        cls = ref_classes[api]

        def ours(api: str = api, body: str = body) -> None:
            req = convert(api, body)
            render(req)
            encode(req, tokenizer)

        def ref(cls: Any = cls, body: str = body) -> None:
            conv = cls(body).convert(options).conversation
            ref_enc.render_conversation(conv)
            ref_enc.encode(conv)

        # parity guard: a benchmark of different work would be meaningless
        req = convert(api, body)
        assert encode(req, tokenizer) == case["token_ids"], case["case_id"]
        ours()  # warm the caches both sides keep (template ids, tool schema checks)
        ref()
        r = _median_time(ours, args.repeats) / _median_time(ref, args.repeats)
        full.append(r)
        if case["conversation"]["tools"]:
            full_tools.append(r)
        conv_only.append(
            _median_time(lambda api=api, body=body: convert(api, body), args.repeats)
            / _median_time(lambda cls=cls, body=body: cls(body).convert(options), args.repeats)
        )

    print(f"cases: {len(full)} (with tools: {len(full_tools)}), median of {args.repeats} runs each")
    print(f"convert+render+encode, Recipe / reference (geometric mean): {_geomean(full):.3f}x")
    print(f"  requests with tools:                                      {_geomean(full_tools):.3f}x")
    print(f"convert only, Recipe / reference (geometric mean):          {_geomean(conv_only):.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
