"""Constraint benchmark: Recipe's constraint layer against xgrammar and llguidance used directly, one run.

Figures (medians, ratios against the anchors measured in the same run):
* JSON-Schema-Test-Suite draft 2020-12 (vendored): overall correctness by the mask alone, completeness,
  tightness, unsound steps — Recipe (normalisation + llguidance) vs llguidance (default, lenient) and
  xgrammar (JSON Schema semantics, `strict_mode=False`, like the others) used directly on the raw schemas.
  Every engine gets the same inputs: the suite's remote documents reach Recipe as `resources` and the
  direct engines embedded in the schema (`$defs` entries with their `$id`), their only way in;
* seven bench schemas (flat, nested, refs_anyof, large_50, any_object, long_string, free_text): compile time
  (schema → ready matcher), per-token mask time (mean, p99) over 129,280 ids while walking a valid
  instance, compiled size. `recipe-raw` walks Recipe's own compiled grammar with the llguidance matcher
  called directly, so the gap to `recipe` is the cost of Recipe's matcher layer (EOS bits, checks; its start-state
  mask is a copy, so that layer can also save time). `recipe-no-reuse` is Recipe with the mask reuse inside
  free JSON strings off (`string_masks`); the figure over the six schemas before free_text was added is
  printed too, for comparison with earlier runs. Each schema's first walk per engine is a warm-up, excluded
  from the figures (Recipe's is printed apart: llguidance builds lexer states lazily).

Usage: .venv/bin/python bench/constraints.py [--quick] [--masks-only] [--clock wall|thread] [--write-figures] [--table]
(--write-figures records the suite table in tests/constraints/suite_figures.json, which a test keeps from falling.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipe.constraints import compile_constraint  # noqa: E402
from recipe.constraints.instance_check import serialise  # noqa: E402
from recipe.constraints.suite import (  # noqa: E402
    FileTally,
    embed_remotes,
    load_remotes,
    load_suite,
    run_suite,
    total,
)
from recipe.tokenizer import load_deepseek_v4_tokenizer  # noqa: E402

SUITE = ROOT / "tests" / "data" / "json-schema-test-suite"
FIGURES = ROOT / "tests" / "constraints" / "suite_figures.json"
# per-mask clock: wall time by default; `--clock thread` counts only this thread's CPU time (a mask is
# computed on the calling thread by every engine here), which a loaded machine's preemptions do not inflate
CLOCK = [time.perf_counter_ns]


def bench_schemas() -> dict[str, tuple[Any, Any]]:
    """(schema, valid instance) pairs shaped like structured-output.md §4's bench set."""
    flat = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                             "active": {"type": "boolean"}, "score": {"type": "number"}},
            "required": ["name", "age", "active", "score"]}
    item = {"type": "object", "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "qty": {"type": "integer", "minimum": 1,
                                                                          "maximum": 999},
        "price": {"type": "number", "minimum": 0}, "flags": {"type": "array", "items": {"enum": ["gift", "fragile",
                                                                                               "express"]}}},
        "required": ["sku", "qty", "price"]}
    nested = {"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^ord_[a-z0-9]{8}$"},
        "status": {"enum": ["new", "paid", "shipped", "cancelled"]},
        "customer": {"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 80},
            "email": {"type": "string", "format": "email"}, "tier": {"enum": ["free", "pro", "enterprise"]}},
            "required": ["name", "email"]},
        "items": {"type": "array", "items": item, "minItems": 1, "maxItems": 20},
        "tags": {"type": "array", "items": {"type": "string"}}, "notes": {"type": "string"}},
        "required": ["id", "status", "customer", "items"]}
    refs = {"$defs": {
        "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                  "required": ["x", "y"]},
        "circle": {"type": "object", "properties": {"kind": {"const": "circle"}, "center": {"$ref": "#/$defs/point"},
                                                    "r": {"type": "number", "minimum": 0}},
                   "required": ["kind", "center", "r"]},
        "rect": {"type": "object", "properties": {"kind": {"const": "rect"}, "a": {"$ref": "#/$defs/point"},
                                                  "b": {"$ref": "#/$defs/point"}}, "required": ["kind", "a", "b"]}},
        "type": "object", "properties": {"shapes": {"type": "array", "items": {"anyOf": [
            {"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/rect"}]}},
            "label": {"anyOf": [{"type": "string"}, {"type": "null"}]}}, "required": ["shapes"]}
    props: dict[str, Any] = {}
    inst50: dict[str, Any] = {}
    kinds = [
        ({"type": "string", "format": "uuid"}, "3f2b8c1e-9d4a-4e6b-8f21-0c7d5a9b1e34"),
        ({"type": "string", "format": "email"}, "a.b@example.com"),
        ({"type": "string", "format": "date"}, "2025-01-17"),
        ({"type": "string", "format": "date-time"}, "2025-01-17T09:30:00Z"),
        ({"type": "string", "format": "uri"}, "https://example.com/x"),
        ({"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, "AB123"),
        ({"enum": ["low", "medium", "high", "critical"]}, "high"),
        ({"type": "integer", "minimum": 0, "maximum": 1000}, 42),
        ({"type": "number", "minimum": -1, "maximum": 1}, 0.25),
        ({"type": "string", "maxLength": 64}, "short text"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 5}, ["a", "b"]),
        ({"type": "object", "properties": {"k": {"type": "integer"}, "v": {"type": "string"}}, "required": ["k"]},
         {"k": 1, "v": "x"}),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, None),
        ({"type": "boolean"}, True),
        ({"type": "string", "maxLength": 2000}, "notes " * 20),
    ]
    for i in range(50):
        sch, val = kinds[i % len(kinds)]
        props[f"field_{i:02d}"] = sch
        inst50[f"field_{i:02d}"] = val
    large = {"type": "object", "properties": props, "required": [f"field_{i:02d}" for i in range(0, 50, 2)]}
    free_text = {"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"},
                                                  "tags": {"type": "array", "items": {"type": "string"}}},
                 "required": ["title", "body"]}
    any_object = {"type": "object"}
    long_string = {"type": "string", "maxLength": 2000}
    return {
        "flat": (flat, {"name": "Ada", "age": 36, "active": True, "score": 9.5}),
        "nested": (nested, {"id": "ord_abc12345", "status": "paid", "customer": {
            "name": "Grace Hopper", "email": "grace@example.com", "tier": "pro"},
            "items": [{"sku": "ABC-1234", "qty": 2, "price": 9.99, "flags": ["gift"]},
                      {"sku": "XYZ-0001", "qty": 1, "price": 120}], "tags": ["vip", "eu"], "notes": "ring twice"}),
        "refs_anyof": (refs, {"shapes": [{"kind": "circle", "center": {"x": 0, "y": 1.5}, "r": 2},
                                         {"kind": "rect", "a": {"x": 0, "y": 0}, "b": {"x": 3, "y": 4}}],
                              "label": None}),
        "large_50": (large, inst50),
        "any_object": (any_object, {"a": [1, 2, {"b": None, "c": "text"}], "d": {"e": {"f": [True, False]}},
                                    "g": -1.5e3}),
        "long_string": (long_string, "The quick brown fox jumps over the lazy dog. " * 12),
        "free_text": (free_text, {"title": "Notes from the meeting", "body": (
            "We went through the release plan line by line.\nOpen points: the \"fast path\" for masks, "
            "the stream parser, and 数据 export. ") * 4, "tags": ["release", "planning"]}),
    }


# ------------------------------------------------------------------------------------------- engines


class RecipeEngine:
    name = "recipe"

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        # build the per-vocabulary llguidance tokenizer outside any timing, as the direct engines do in theirs
        # (on a loaded machine it can take longer than the compile timeout)
        compile_constraint("json_object", None, tok, cache=None, timeout_s=600)

    def compile(self, schema: Any) -> Any:
        return compile_constraint("json_schema", schema, self.tok, strict=False, cache=None)

    reuse_string_masks = True

    def walk(self, compiled: Any, ids: list[int]) -> list[float]:
        m = compiled.matcher(reuse_string_masks=self.reuse_string_masks)
        mask = compiled.allocate_bitmask()
        times = []
        accepts = self.__dict__.setdefault("accept_times", [])  # accept per id (the string tracker's cost)
        for t in ids:
            t0 = CLOCK[0]()
            m.fill_bitmask(mask)
            t1 = CLOCK[0]()
            assert (int(mask[t >> 5]) >> (t & 31)) & 1
            ok = m.accept(t)
            accepts.append((CLOCK[0]() - t1) / 1000)
            times.append((t1 - t0) / 1000)
            assert ok
        return times

    def size(self, compiled: Any) -> int:
        return int(compiled.size_bytes)


class RecipeNoStringReuse(RecipeEngine):
    """Recipe with the mask reuse inside free JSON strings turned off (`string_masks`): the A/B of that reuse."""

    name = "recipe-no-reuse"
    reuse_string_masks = False

    def __init__(self, tok: Any) -> None:
        self.tok = tok


class RecipeRawCompute(RecipeEngine):
    """Recipe's compiled grammar with the llguidance matcher called directly (no Recipe matcher around it):
    its mask time is the matcher's own compute, so recipe − recipe-raw is the Python layer's cost."""

    name = "recipe-raw"

    def __init__(self, tok: Any) -> None:
        self.tok = tok

    def walk(self, compiled: Any, ids: list[int]) -> list[float]:
        m = compiled.matcher().backend_matcher.raw
        mask = compiled.allocate_bitmask()
        ptr, nbytes = mask.ctypes.data, mask.nbytes
        times = []
        for t in ids:
            t0 = CLOCK[0]()
            m.unsafe_compute_mask_ptr(ptr, nbytes)
            times.append((CLOCK[0]() - t0) / 1000)
            assert (int(mask[t >> 5]) >> (t & 31)) & 1 and m.consume_token(t)
        return times


class LLGuidanceDirect:
    def __init__(self, tok: Any, lenient: bool) -> None:
        import llguidance as llg

        self.llg = llg
        self.name = "llguidance-lenient" if lenient else "llguidance"
        self.lenient = lenient
        self.t = llg.LLTokenizer(tok.full.to_str(), n_vocab=tok.vocab_size, eos_token=1)

    def compile(self, schema: Any) -> Any:
        g = self.llg.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), overrides={"lenient": True} if self.lenient else None)
        m = self.llg.LLMatcher(self.t, g, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return g

    def walk(self, g: Any, ids: list[int]) -> list[float]:
        m = self.llg.LLMatcher(self.t, g, log_level=0)
        mask = np.zeros(4040, dtype=np.int32)
        ptr, nbytes = mask.ctypes.data, mask.nbytes  # looked up once, as Recipe's matcher does
        times = []
        for t in ids:
            t0 = CLOCK[0]()
            m.unsafe_compute_mask_ptr(ptr, nbytes)
            times.append((CLOCK[0]() - t0) / 1000)
            assert (int(mask[t >> 5]) >> (t & 31)) & 1 and m.consume_token(t)
        return times

    def size(self, g: Any) -> int:
        return len(g)


class XGrammarDirect:
    name = "xgrammar"

    def __init__(self, tok: Any) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        spec = json.loads(tok.full.to_str())
        enc = [""] * tok.vocab_size
        for s, i in spec["model"]["vocab"].items():
            enc[i] = s
        for a in spec["added_tokens"]:
            enc[a["id"]] = ""
        info = xgr.TokenizerInfo(enc, xgr.VocabType.BYTE_LEVEL, vocab_size=tok.vocab_size, stop_token_ids=[1])
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile(self, schema: Any) -> Any:
        # strict_mode=False: JSON Schema's own semantics (extra properties and items allowed unless the schema
        # says otherwise), as Recipe and llguidance apply them; strict mode would reject valid instances
        return self.compiler.compile_json_schema(json.dumps(schema), strict_mode=False)

    def walk(self, cg: Any, ids: list[int]) -> list[float]:
        m = self.xgr.GrammarMatcher(cg)
        mask = np.zeros((1, 4040), dtype=np.int32)
        times = []
        for t in ids:
            t0 = CLOCK[0]()
            m.fill_next_token_bitmask(mask)
            times.append((CLOCK[0]() - t0) / 1000)
            assert (int(mask[0, t >> 5]) >> (t & 31)) & 1 and m.accept_token(t)
        return times

    def size(self, cg: Any) -> int:
        return int(cg.memory_size_bytes)


# ------------------------------------------------------------------------------------------- suite


def suite_direct(engine: Any, tok: Any, remotes: dict[str, Any]) -> FileTally:
    """An engine used directly on the raw suite schemas (no Recipe normalisation), given the same remote
    documents Recipe gets as `resources`, embedded in the schema (`embed_remotes`: its only way in)."""
    t = FileTally()
    for groups in load_suite(SUITE / "draft2020-12").values():
        for g in groups:
            ft = FileTally(groups=1)
            tests = g["tests"]
            ft.valid = sum(1 for x in tests if x["valid"])
            ft.invalid = len(tests) - ft.valid
            try:
                c = engine.compile(embed_remotes(g["schema"], remotes))
            except Exception:
                t.add(ft)
                continue
            ft.compiled = 1
            ft.invalid_in_compiled = ft.invalid
            for x in tests:
                ids = tok.encode_plain(serialise(x["data"]))
                try:
                    engine.walk(c, ids)
                    ok = _terminates(engine, c, ids)
                except AssertionError:
                    ok = False
                if x["valid"] and ok:
                    ft.valid_accepted += 1
                elif not x["valid"] and not ok:
                    ft.invalid_rejected += 1
            t.add(ft)
    return t


def _terminates(engine: Any, c: Any, ids: list[int]) -> bool:
    if isinstance(engine, LLGuidanceDirect):
        m = engine.llg.LLMatcher(engine.t, c, log_level=0)
        return m.consume_tokens(ids) and m.is_accepting()
    m = engine.xgr.GrammarMatcher(c)
    return all(m.accept_token(t) for t in ids) and m.accept_token(1) and m.is_terminated()


def markdown_table(data: dict[str, Any]) -> str:
    """The per-keyword-file table of suite_figures.json (README form)."""
    rows = ["| keyword file | groups compiled | valid accepted (completeness) | invalid rejected (tightness) "
            "| overall |", "|---|---:|---:|---:|---:|"]
    for name, f in sorted(data["files"].items()):
        rows.append(f"| {name} | {f['compiled']}/{f['groups']} | {f['valid_accepted']}/{f['valid']} | "
                    f"{f['invalid_rejected']}/{f['invalid']} | {pct(f['overall'])} |")
    t = data["total"]
    rows.append(f"| **total** | {t['compiled']}/{t['groups']} | {t['valid_accepted']}/{t['valid']} "
                f"({pct(t['completeness'])}) | {t['invalid_rejected']}/{t['invalid']} ({pct(t['tightness'])}) "
                f"| **{pct(t['overall'])}** |")
    for name, a in sorted(data.get("anchors", {}).items()):
        rows.append(f"| *{name} used directly* | {a['compiled']}/{a['groups']} | {a['valid_accepted']}/{a['valid']} "
                    f"| {a['invalid_rejected']}/{a['invalid']} | {pct(a['overall'])} |")
    return "\n".join(rows)


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--write-figures", action="store_true")
    ap.add_argument("--table", action="store_true", help="print the recorded suite table as markdown and exit")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall", help="per-mask clock (see CLOCK)")
    ap.add_argument("--masks-only", action="store_true", help="skip the suite: bench schemas only (compile, mask)")
    args = ap.parse_args()
    if args.table:
        print(markdown_table(json.loads(FIGURES.read_text())))
        return
    if args.clock == "thread":
        CLOCK[0] = time.thread_time_ns
    tok = load_deepseek_v4_tokenizer()
    remotes = load_remotes(SUITE / "remotes")
    reps = 3 if args.quick else 7
    walks = 3 if args.quick else 10

    engines: list[Any] = [LLGuidanceDirect(tok, False), LLGuidanceDirect(tok, True)]
    try:
        engines.append(XGrammarDirect(tok))
    except ImportError:
        print("xgrammar not installed: skipped")
    if not args.masks_only:
        run_suite_figures(args, tok, remotes, engines)
    bench_masks(tok, engines, reps, walks)


def run_suite_figures(args: Any, tok: Any, remotes: Any, engines: list[Any]) -> None:
    """The suite section: Recipe against the direct engines, then --write-figures."""
    t0 = time.perf_counter()
    tallies = run_suite(SUITE / "draft2020-12", tok, remotes=remotes)
    recipe_total = total(tallies)
    recipe_s = time.perf_counter() - t0
    anchors: dict[str, FileTally] = {}
    for e in engines:
        anchors[e.name] = suite_direct(e, tok, remotes)
    print(f"\nJSON-Schema-Test-Suite draft 2020-12 ({recipe_total.groups} groups, {recipe_total.tests} tests), "
          f"mask alone, compile failure = wrong")
    print(f"{'engine':22s} {'compiled':>9s} {'complete':>9s} {'tight':>8s} {'overall':>8s} {'unsound':>8s}")
    rows = [("recipe", recipe_total), *anchors.items()]
    for name, t in rows:
        f = t.figures()
        print(f"{name:22s} {t.compiled:>4d}/{t.groups:<4d} {pct(f['completeness']):>9s} {pct(f['tightness']):>8s} "
              f"{pct(f['overall']):>8s} {t.unsound:>8d}")
    best = max(anchors.values(), key=lambda t: t.figures()["overall"]) if anchors else None
    if best is not None:
        print(f"ratio recipe/best-direct overall correctness: "
              f"{recipe_total.figures()['overall'] / best.figures()['overall']:.3f}  (recipe suite wall {recipe_s:.1f} s)")

    if args.write_figures:
        data = {"files": {k: v.figures() for k, v in tallies.items()}, "total": recipe_total.figures(),
                "anchors": {k: v.figures() for k, v in anchors.items()}}
        FIGURES.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {FIGURES.relative_to(ROOT)}")


def bench_masks(tok: Any, engines: list[Any], reps: int, walks: int) -> None:
    """Compile time and per-token mask time on the bench schemas, Recipe against the direct engines."""
    print("\nbench schemas (compile ms median; mask µs mean / p99 over 129,280 ids; compiled size)")
    bench_engines: list[Any] = [RecipeEngine(tok), RecipeNoStringReuse(tok), RecipeRawCompute(tok),
                                *[e for e in engines if e.name != "llguidance-lenient"]]
    compile_ratios: dict[str, list[float]] = {e.name: [] for e in bench_engines}
    mask_ratios: dict[str, list[float]] = {e.name: [] for e in bench_engines}
    all_recipe_masks: list[float] = []
    no_reuse_masks: list[float] = []
    six_masks: list[float] = []
    first_walks: dict[str, list[float]] = {}
    raw_masks: list[float] = []
    recipe_compiles: list[float] = []
    for case, (schema, inst) in bench_schemas().items():
        jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(inst)
        ids = tok.encode_plain(serialise(inst))
        res = {}
        compiled: dict[str, Any] = {}
        comps: dict[str, list[float]] = {}
        for e in bench_engines:
            comp = comps[e.name] = []
            for _ in range(reps):
                t0 = time.perf_counter()
                compiled[e.name] = e.compile(schema)
                e.walk(compiled[e.name], ids[:1])  # ready matcher = compiled + first mask
                comp.append((time.perf_counter() - t0) * 1000)
        walked: dict[str, list[float]] = {e.name: [] for e in bench_engines}
        for w in range(walks + 1):  # engines interleaved walk by walk: load on a shared machine hits all alike;
            k = w % len(bench_engines)  # the order rotates, so no engine always runs after the same one
            for e in bench_engines[k:] + bench_engines[:k]:
                times = e.walk(compiled[e.name], ids)
                # walk 0 is the warm-up (llguidance builds lexer states lazily, 2-4x the later walks' time):
                # reported apart for Recipe, excluded from the figures
                (first_walks.setdefault(e.name, []) if w == 0 else walked[e.name]).extend(times)
        for e in bench_engines:
            comp, masks, c = comps[e.name], walked[e.name], compiled[e.name]
            res[e.name] = (statistics.median(comp), statistics.fmean(masks), float(np.percentile(masks, 99)),
                           e.size(c))
            if e.name == "recipe":
                all_recipe_masks.extend(masks)
                if case != "free_text":
                    six_masks.extend(masks)
                recipe_compiles.extend(comp)
            elif e.name == "recipe-raw":
                raw_masks.extend(masks)
            elif e.name == "recipe-no-reuse":
                no_reuse_masks.extend(masks)
        line = " | ".join(f"{n}: {c_:.2f} ms, {m:.1f}/{p:.0f} µs, {s / 1024:.0f} KiB" for n, (c_, m, p, s)
                          in res.items())
        print(f"{case:12s} ({len(ids)} tok) {line}")
        for n, (c_, m, _, _) in res.items():
            if n in ("recipe-raw", "recipe-no-reuse"):
                continue
            compile_ratios[n].append(c_ / res["recipe"][0])
            mask_ratios[n].append(m / res["recipe"][1])
    print(f"\nrecipe compile p50 {statistics.median(recipe_compiles):.2f} ms; mask mean "
          f"{statistics.fmean(all_recipe_masks):.1f} µs, p99 {np.percentile(all_recipe_masks, 99):.0f} µs")
    print(f"recipe over the six schemas without free_text: mask mean {statistics.fmean(six_masks):.1f} µs, "
          f"p99 {np.percentile(six_masks, 99):.0f} µs")
    cold = first_walks.get("recipe", [])
    if cold:
        print(f"recipe first walk of each schema (warm-up, excluded above): mask mean {statistics.fmean(cold):.1f} µs, "
              f"p99 {np.percentile(cold, 99):.0f} µs")
    for e in bench_engines[:2]:
        acc = getattr(e, "accept_times", [])
        if acc:
            print(f"{e.name} accept per id: mean {statistics.fmean(acc):.2f} µs, p50 {statistics.median(acc):.2f} µs")
    if no_reuse_masks:
        print(f"recipe-no-reuse (string-mask reuse off): mask mean {statistics.fmean(no_reuse_masks):.1f} µs, "
              f"p99 {np.percentile(no_reuse_masks, 99):.0f} µs")
    if raw_masks:
        print(f"recipe-raw (llguidance on Recipe's grammar, no Recipe layer): mask mean {statistics.fmean(raw_masks):.1f} µs, "
              f"p99 {np.percentile(raw_masks, 99):.0f} µs")
    for n in compile_ratios:
        if n in ("recipe", "recipe-raw", "recipe-no-reuse"):
            continue
        print(f"ratio {n}/recipe (median over schemas): compile {statistics.median(compile_ratios[n]):.2f}x, "
              f"mask mean {statistics.median(mask_ratios[n]):.2f}x")


if __name__ == "__main__":
    main()
