"""Long-text encoding and incremental detokenization, against their anchors, in one run.

    .venv/bin/python bench/encode_long.py                      # 10K, 100K, 1M, 10M chars
    .venv/bin/python bench/encode_long.py --sizes 10000,1000000 --no-single-thread
    .venv/bin/python bench/encode_long.py --sizes 10000,100000,1000000 --json bench/results/encode_long.json

For each size of deterministic mixed text (English prose, Chinese and kana, digit strings, code, odd
whitespace) wrapped as one user message (V4, thinking off):

* anchor: the official reference, `deepseek_recipe.DeepseekV4Encoding().with_tokenizer(t).encode(conv)`;
* one-pass `tokenizers`: `encode` of the plain text with the added vocabulary removed;
* Recipe: the same rendered prompt, special spans one id each and the plain text through
  `Tokenizer.encode_plain` (segment-parallel above the threshold).

Medians of several runs; ratios are anchor time / candidate time (above 1 = faster than the anchor).
Ids are checked equal to the reference's. The same measurement is repeated in a child process with
`RAYON_NUM_THREADS=1` to show how much comes from the second core; "CPU ref/recipe" compares process
CPU time (all threads), i.e. work per character whatever the number of free cores. `--sweep` adds the threshold and
segment-size sweep that set `DEFAULT_THRESHOLD_CHARS` / `DEFAULT_SEGMENT_CHARS`. The detokenizer is
measured as ids/s of `IncrementalDetokenizer.add` (one id at a time) against one-shot `decode`.
The development machine is 2 cores shared with other engineers: absolute times are noise, ratios
from one run are the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deepseek_recipe as dr

from recipe.detokenizer import IncrementalDetokenizer
from recipe.segments import DEFAULT_SEGMENT_CHARS, DEFAULT_THRESHOLD_CHARS
from recipe.tokenizer import Tokenizer, deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer


def mixed_text(chars: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    english = [
        "The quick brown fox jumps over the lazy dog.",
        "In 2024, revenue grew by 12.5% to $3,456,789.",
        "Transformers encode long documents efficiently, and then they stream tokens back.",
        "Don't split words; it'll change the ids they've got.",
    ]
    chinese = ["自然语言处理是人工智能的一个重要领域。", "今天天气很好，我们去公园散步吧！", "深度学习模型需要大量的数据进行训练。"]
    code = [
        "def f(x):\n    return x ** 2 + 1\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
        "    if not items:\n        raise ValueError('empty')\n",
    ]
    parts: list[str] = []
    size = 0
    while size < chars:
        k = rng.random()
        if k < 0.5:
            s = " ".join(rng.choice(english) for _ in range(rng.randint(1, 5))) + "\n"
        elif k < 0.7:
            s = "".join(rng.choice(chinese) for _ in range(rng.randint(1, 4))) + "\n"
        elif k < 0.8:
            s = str(rng.randrange(10 ** rng.randint(1, 20))) + " "
        else:
            s = rng.choice(code)
        parts.append(s)
        size += len(s)
    return "".join(parts)[:chars]


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def interleaved_medians(
    fns: list[Callable[[], Any]], repeats: int, cpu: list[float] | None = None, warm: bool = False
) -> list[tuple[float, Any]]:
    """Median wall time of each function, run in turn within every repetition (load drifts hit all alike).

    With `warm`, each timed call follows an untimed call of the same function: small inputs are
    otherwise dominated by CPU caches left cold by the previous candidate (a tokenizer's vocabulary
    tables are megabytes). With `cpu`, the median process CPU time of each function (all threads) is
    appended to it.
    """
    times: list[list[float]] = [[] for _ in fns]
    cpu_times: list[list[float]] = [[] for _ in fns]
    results: list[Any] = [None] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            if warm:
                fn()
            start, start_cpu = time.perf_counter(), time.process_time()
            results[i] = fn()
            times[i].append(time.perf_counter() - start)
            cpu_times[i].append(time.process_time() - start_cpu)
    if cpu is not None:
        cpu.extend(statistics.median(c) for c in cpu_times)
    return [(statistics.median(t), r) for t, r in zip(times, results, strict=True)]


def repeats_for(chars: int) -> int:
    return 15 if chars <= 10_000 else 7 if chars <= 100_000 else 5 if chars <= 1_000_000 else 3


def recipe_encode(tok: Tokenizer, prompt: str, special_ranges: list[tuple[int, int]]) -> list[int]:
    ids: list[int] = []
    at = 0
    for start, end in [*special_ranges, (len(prompt), len(prompt))]:
        ids += tok.encode_plain(prompt[at:start])
        if start < end:
            ids.append(tok.special_id(prompt[start:end]))
        at = end
    return ids


def measure_encode(sizes: list[int]) -> list[dict[str, Any]]:
    tok = load_deepseek_v4_tokenizer()
    reference = dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path())))
    rows = []
    for chars in sizes:
        text = mixed_text(chars, seed=chars)
        conv = dr.Conversation([dr.UserMessage(text)], thinking_mode=False)
        rendered = reference.render_conversation(conv)
        prompt, ranges = rendered.prompt, [tuple(r) for r in rendered.special_ranges]
        reps = repeats_for(chars)
        # warm-up (BPE caches, thread pool) for all three
        reference.encode(conv), tok.encode_plain_one_pass(text), recipe_encode(tok, prompt, ranges)  # type: ignore[arg-type]
        cpu: list[float] = []
        (t_ref, ref_ids), (t_hf, hf_ids), (t_rec, rec_ids) = interleaved_medians(
            [
                lambda conv=conv: reference.encode(conv),
                lambda text=text: tok.encode_plain_one_pass(text),
                lambda p=prompt, r=ranges: recipe_encode(tok, p, r),  # type: ignore[misc]
            ],
            reps,
            cpu,
            warm=chars <= 100_000,
        )
        if rec_ids != ref_ids:
            raise SystemExit(f"ids differ from the reference at {chars} chars")
        plain = [i for i in ref_ids if i not in tok.special_ids]
        if hf_ids != plain:
            raise SystemExit(f"one-pass tokenizers ids differ from the reference at {chars} chars")
        rows.append(
            {
                "chars": chars,
                "tokens": len(ref_ids),
                "segments": len(tok.segments.bounds(text)) - 1,
                "ref_ms": t_ref * 1e3,
                "hf_ms": t_hf * 1e3,
                "recipe_ms": t_rec * 1e3,
                "ref_cpu_ms": cpu[0] * 1e3,
                "recipe_cpu_ms": cpu[2] * 1e3,
            }
        )
    return rows


def measure_sweep() -> None:
    tok = load_deepseek_v4_tokenizer()
    print("\nthreshold sweep: one pass (encode_batch_fast of the whole text) vs segments of 1/4..1/2 of it, medians")
    print(f"{'chars':>9} {'one-pass ms':>12} {'segmented ms':>13} {'one-pass/segmented':>19}")
    for chars in (1_024, 2_048, 4_096, 8_192, 16_384, 32_768, 65_536):
        text = mixed_text(chars, seed=chars)
        seg = min(DEFAULT_SEGMENT_CHARS, chars // 4)
        (t_one, _), (t_seg, _) = interleaved_medians(
            [
                lambda text=text: tok.segments.encode(text, threshold_chars=len(text) + 1),
                lambda text=text, seg=seg: tok.segments.encode(text, segment_chars=seg, threshold_chars=0),
            ],
            25,
            warm=True,
        )
        print(f"{chars:>9} {t_one * 1e3:>12.2f} {t_seg * 1e3:>13.2f} {t_one / t_seg:>19.2f}")
    text = mixed_text(1_000_000, seed=1)
    print("\nsegment-size sweep at 1M chars, medians")
    print(f"{'segment chars':>14} {'segments':>9} {'ms':>9}")
    for seg in (1_024, 2_048, 4_096, 8_192, 16_384, 32_768, 131_072):
        t, _ = median_time(lambda seg=seg: tok.segments.encode(text, segment_chars=seg, threshold_chars=0), 5)
        print(f"{seg:>14} {len(tok.segments.bounds(text, segment_chars=seg, threshold_chars=0)) - 1:>9} {t * 1e3:>9.1f}")


def measure_detokenizer() -> dict[str, float]:
    tok = load_deepseek_v4_tokenizer()
    ids = tok.full.encode(mixed_text(200_000, seed=11), add_special_tokens=False).ids
    IncrementalDetokenizer(tok)  # build the byte table once, outside the timing

    def stream() -> str:
        detok = IncrementalDetokenizer(tok)
        add = detok.add
        return "".join([add(i) for i in ids]) + detok.finish()

    (t_stream, text), (t_once, once) = interleaved_medians([stream, lambda: tok.decode(ids)], 7)
    if text != once:
        raise SystemExit("incremental detokenizer output differs from one-shot decode")
    return {"ids": len(ids), "stream_ids_per_s": len(ids) / t_stream, "oneshot_ids_per_s": len(ids) / t_once}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000,10000000", help="comma-separated character counts")
    parser.add_argument("--no-single-thread", action="store_true", help="skip the RAYON_NUM_THREADS=1 child run")
    parser.add_argument("--sweep", action="store_true", help="also run the threshold and segment-size sweeps")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the encode figure here and the detokenizer's to detokenizer.json beside it "
                             "(bench/results/ feeds docs/performance.md)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.child:
        print(json.dumps(measure_encode(sizes)))
        return

    print(f"cores: {os.cpu_count()}, threshold {DEFAULT_THRESHOLD_CHARS} chars, segments of ~{DEFAULT_SEGMENT_CHARS} chars")
    rows = measure_encode(sizes)
    single: dict[int, dict[str, Any]] = {}
    if not args.no_single_thread:
        env = dict(os.environ, RAYON_NUM_THREADS="1")
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--sizes", args.sizes], env=env, check=True, capture_output=True, text=True
        )
        single = {r["chars"]: r for r in json.loads(out.stdout.strip().splitlines()[-1])}
    print("\nencode, medians in ms; ratio = reference time / candidate time; ids equal to the reference: yes")
    print(
        f"{'chars':>10} {'tokens':>9} {'segs':>5} {'reference':>10} {'one-pass':>9} {'recipe':>9}"
        f" {'ref/one-pass':>13} {'ref/recipe':>11} {'ref/recipe 1 thread':>20} {'CPU ref/recipe':>15}"
    )
    for r in rows:
        one = single.get(r["chars"])
        one_thread = f"{one['ref_ms'] / one['recipe_ms']:.2f}" if one else "-"
        print(
            f"{r['chars']:>10} {r['tokens']:>9} {r['segments']:>5} {r['ref_ms']:>10.1f} {r['hf_ms']:>9.1f}"
            f" {r['recipe_ms']:>9.1f} {r['ref_ms'] / r['hf_ms']:>13.2f} {r['ref_ms'] / r['recipe_ms']:>11.2f}"
            f" {one_thread:>20} {r['ref_cpu_ms'] / r['recipe_cpu_ms']:>15.2f}"
        )
    if args.sweep:
        measure_sweep()
    d = measure_detokenizer()
    print(
        f"\ndetokenizer over {d['ids']} ids: incremental {d['stream_ids_per_s']:,.0f} ids/s,"
        f" one-shot decode {d['oneshot_ids_per_s']:,.0f} ids/s,"
        f" incremental/one-shot {d['stream_ids_per_s'] / d['oneshot_ids_per_s']:.2f}; output equal: yes"
    )
    if args.json:
        _write_json(args, rows, single, d)


def _write_json(args: argparse.Namespace, rows: list[dict[str, Any]], single: dict[int, dict[str, Any]],
                d: dict[str, Any]) -> None:
    """The largest size's ratio is the headline, in the form scripts/make_performance_doc.py reads."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from make_performance_doc import merge_result

    command = f".venv/bin/python bench/encode_long.py --sizes {args.sizes}" + (
        " --no-single-thread" if args.no_single_thread else "")
    ratios = {r["chars"]: r["ref_ms"] / r["recipe_ms"] for r in rows}
    top = max(ratios)
    rest = "; ".join(f"{n:,}: {ratios[n]:.2f}×" for n in sorted(ratios, reverse=True)[1:])
    one = single.get(top)
    figure = f"**{ratios[top]:.2f}×** faster at {top:,} characters" + (f" ({rest})" if rest else "")
    if one:
        figure += f"; `RAYON_NUM_THREADS=1`: {one['ref_ms'] / one['recipe_ms']:.2f}×"
    merge_result(args.json, {
        "command": command, "figure": figure, "headline": f"{ratios[top]:.2f}× faster",
        "status": "met" if ratios[top] >= 1.5 else "not met", "data": {"rows": rows},
    })
    rate = d["stream_ids_per_s"] / d["oneshot_ids_per_s"]
    merge_result(Path(args.json).with_name("detokenizer.json"), {
        "command": command,
        "figure": f"{d['stream_ids_per_s'] / 1e6:.1f} M ids/s, **{rate:.2f}×** one-shot decode's rate",
        "data": d,
    })


if __name__ == "__main__":
    main()
