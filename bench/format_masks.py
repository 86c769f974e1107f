"""Mask time inside format strings on values the process has not seen: the composed masks (`format_masks`)
against the same matcher with them off and llguidance used directly, one run.

bench/constraints.py walks the same instance again and again; here every walk of large_50 and nested (its
schemas) gets fresh random uris, emails, dates, uuids and pattern values, so what the reuse keeps from one
walk to the next is only what the DFA states have in common. Walk 0 is a warm-up for every engine (as there).

Usage: .venv/bin/python bench/format_masks.py [--walks N] [--clock wall|thread]
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from constraints import LLGuidanceDirect, bench_schemas  # noqa: E402

from recipe.constraints import compile_constraint  # noqa: E402
from recipe.constraints.instance_check import serialise  # noqa: E402
from recipe.tokenizer import load_deepseek_v4_tokenizer  # noqa: E402


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(rng.randrange(2, 10)))


def _fresh(rng: random.Random, schema: Any, value: Any) -> Any:
    """`value` with every format or pattern string replaced by a new random valid one."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: _fresh(rng, props.get(k, {}), v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(rng, schema.get("items", {}), v) for v in value]
    if not isinstance(value, str) or not isinstance(schema, dict):
        return value
    fmt, pattern = schema.get("format"), schema.get("pattern")
    hexd = lambda n: "".join(rng.choice("0123456789abcdef") for _ in range(n))  # noqa: E731
    if fmt == "uri":
        return (f"{rng.choice(['https', 'http', 'ftp'])}://{_word(rng)}.{rng.choice(['com', 'org', 'io'])}"
                + "".join("/" + _word(rng) for _ in range(rng.randrange(0, 3))) + rng.choice(["", "?q=" + _word(rng)]))
    if fmt == "email":
        return f"{_word(rng)}{rng.choice(['', '.' + _word(rng)])}@{_word(rng)}.{rng.choice(['com', 'net', 'de'])}"
    if fmt == "uuid":
        return f"{hexd(8)}-{hexd(4)}-{hexd(4)}-{hexd(4)}-{hexd(12)}"
    if fmt == "date":
        return f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    if fmt == "date-time":
        return (f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T"
                f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z")
    if pattern == "^ord_[a-z0-9]{8}$":
        return "ord_" + "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    if pattern == "^[A-Z]{3}-[0-9]{4}$":
        return "".join(rng.choice(string.ascii_uppercase) for _ in range(3)) + f"-{rng.randrange(10000):04d}"
    if pattern == "^[A-Z]{2}[0-9]{3}$":
        return "".join(rng.choice(string.ascii_uppercase) for _ in range(2)) + f"{rng.randrange(1000):03d}"
    return value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--walks", type=int, default=8)
    ap.add_argument("--clock", choices=["wall", "thread"], default="thread")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write the figures here (bench/results/format_masks.json feeds docs/performance.md)")
    args = ap.parse_args()
    clock = time.thread_time_ns if args.clock == "thread" else time.perf_counter_ns
    tok = load_deepseek_v4_tokenizer()
    direct = LLGuidanceDirect(tok, lenient=False)
    rng = random.Random(2026)
    totals: dict[str, list[float]] = {"recipe": [], "recipe-no-format-reuse": [], "llguidance": []}
    for name in ("large_50", "nested"):
        schema, inst = bench_schemas()[name]
        compiled = compile_constraint("json_schema", schema, tok, strict=False, cache=None, timeout_s=600)
        grammar = direct.compile(schema)
        times: dict[str, list[float]] = {k: [] for k in totals}
        for w in range(args.walks + 1):
            ids = tok.encode_plain(serialise(_fresh(rng, schema, inst)))
            for engine in totals:
                if engine == "llguidance":
                    walked = _direct_walk(direct, grammar, ids, clock)
                else:
                    walked = _walk(compiled, ids, engine == "recipe", clock)
                if w:
                    times[engine].extend(walked)
        for engine, ts in times.items():
            totals[engine].extend(ts)
        print(f"{name:9s} " + " | ".join(f"{e}: {statistics.fmean(t):.1f}/{np.percentile(t, 99):.0f} µs"
                                          for e, t in times.items()))
    print("both     " + " | ".join(f"{e}: {statistics.fmean(t):.1f}/{np.percentile(t, 99):.0f} µs"
                                   for e, t in totals.items()) + "  (mask mean/p99, fresh values every walk)")
    if args.json:
        _write_json(args, {e: (statistics.fmean(t), float(np.percentile(t, 99))) for e, t in totals.items()})


def _write_json(args: argparse.Namespace, figures: dict[str, tuple[float, float]]) -> None:
    """Mean / p99 per engine, in the form scripts/make_performance_doc.py reads."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from make_performance_doc import merge_result

    (on, on99), (off, off99), (llg, llg99) = (figures[k] for k in ("recipe", "recipe-no-format-reuse", "llguidance"))
    merge_result(args.json, {
        "command": f".venv/bin/python bench/format_masks.py --walks {args.walks} --clock {args.clock}",
        "figure": f"{on:.1f} / {on99:.0f} µs mean / p99 with the DFA-state reuse, {off:.1f} / {off99:.0f} without, "
                  f"llguidance directly {llg:.1f} / {llg99:.0f}",
        "status": "met" if on <= 20 and on99 <= 200 else "not met",
        "data": {k: {"mean_us": m, "p99_us": p} for k, (m, p) in figures.items()},
    })


def _walk(compiled: Any, ids: list[int], reuse: bool, clock: Any) -> list[float]:
    m = compiled.matcher(reuse_format_masks=reuse)
    mask = compiled.allocate_bitmask()
    out = []
    for t in ids:
        t0 = clock()
        m.fill_bitmask(mask)
        out.append((clock() - t0) / 1000)
        assert m.accept(t)
    return out


def _direct_walk(direct: Any, grammar: Any, ids: list[int], clock: Any) -> list[float]:
    m = direct.llg.LLMatcher(direct.t, grammar, log_level=0)
    mask = np.zeros(4040, dtype=np.int32)
    ptr, nbytes = mask.ctypes.data, mask.nbytes
    out = []
    for t in ids:
        t0 = clock()
        m.unsafe_compute_mask_ptr(ptr, nbytes)
        out.append((clock() - t0) / 1000)
        assert m.consume_token(t)
    return out


if __name__ == "__main__":
    main()
