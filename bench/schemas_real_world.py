"""Real-world schemas (SchemaStore, tests/data/real_world_schemas) with their own published examples.

Prints, for `compile_constraint(..., strict=False)` with each schema's `$ref`'d documents as `resources`:
* compiled rate (schemas that compile);
* valid examples accepted when their keys are in schema order (re-ordered, serialised, walked token by token
  through the mask; EOS must be allowed at the end);
* invalid examples rejected, by the mask or by the post-generation check (and by the mask alone);
* unsound steps (the mask allowed an id its matcher then refused): must be 0;
* the same figures for llguidance used directly on the raw schema (lenient, so it compiles what it can;
  it reads no remote documents, so a schema that `$ref`s one fails there), the anchor a user would
  otherwise run; its "rejected" also counts the post-generation check, as Recipe's does.

Goals (issue 12): ≥ 97% compiled, ≥ 97% accepted, ≥ 95% rejected, 0 unsound.
Usage: .venv/bin/python bench/schemas_real_world.py [--limit N] [--failures]
(--write-figures records the totals and the fast slice's in tests/constraints/real_world_figures.json, which
tests/constraints/test_real_world.py keeps from falling.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipe.constraints.instance_check import serialise  # noqa: E402
from recipe.constraints.real_world import Tally, in_fast_slice, load_corpus, run_schema  # noqa: E402
from recipe.constraints.report import validate_value  # noqa: E402
from recipe.constraints.schema_order import in_schema_order  # noqa: E402
from recipe.tokenizer import load_deepseek_v4_tokenizer  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "real_world_schemas" / "corpus.jsonl.gz"
FIGURES = ROOT / "tests" / "constraints" / "real_world_figures.json"
GOALS = {"compiled_rate": 0.97, "accepted_rate": 0.97, "rejected_rate": 0.95}


class LLGuidanceDirect:
    """llguidance on the raw schema (lenient, so it compiles what it can), the mask alone."""

    def __init__(self, tok: Any) -> None:
        import llguidance as llg

        self.llg = llg
        self.t = llg.LLTokenizer(tok.full.to_str(), n_vocab=tok.vocab_size, eos_token=1)

    def run(self, rec: dict[str, Any], tok: Any) -> Tally:
        t = Tally(schemas=1, valid=len(rec["valid"]), invalid=len(rec["invalid"]))
        try:
            g = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(rec["schema"]), overrides={"lenient": True})
            m = self.llg.LLMatcher(self.t, g, log_level=0)
            if m.is_error():
                return t
        except ValueError:
            return t
        t.compiled = 1
        for kind in ("valid", "invalid"):
            for ex in rec[kind]:
                ids = tok.encode_plain(serialise(in_schema_order(ex["data"], rec["schema"], rec.get("resources"))))
                ok = self._walk(g, ids)
                if kind == "valid" and ok:
                    t.valid_accepted += 1
                elif kind == "invalid":
                    rejected_by_mask = not ok
                    t.invalid_rejected_by_mask += int(rejected_by_mask)
                    post = validate_value(rec["schema"], ex["data"], rec.get("resources"))
                    t.invalid_rejected += int(rejected_by_mask or bool(post))
        return t

    def _walk(self, g: Any, ids: list[int]) -> bool:
        m = self.llg.LLMatcher(self.t, g, log_level=0)
        mask = np.zeros(4040, dtype=np.int32)
        for t in ids:
            m.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
            if not (int(mask[t >> 5]) >> (t & 31)) & 1 or not m.consume_token(t):
                return False
        return bool(m.is_accepting())


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def line(name: str, t: Tally) -> str:
    f = t.figures()
    return (f"{name:24s} compiled {t.compiled}/{t.schemas} ({pct(f['compiled_rate'])})  "
            f"valid accepted {t.valid_accepted}/{t.valid} ({pct(f['accepted_rate'])})  "
            f"invalid rejected {t.invalid_rejected}/{t.invalid} ({pct(f['rejected_rate'])}; "
            f"by the mask alone {pct(f['rejected_by_mask_rate'])})  unsound {t.unsound}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=0, help="only the first N schemas")
    ap.add_argument("--failures", action="store_true", help="list every failure")
    ap.add_argument("--no-anchor", action="store_true", help="skip llguidance used directly")
    ap.add_argument("--write-figures", action="store_true")
    args = ap.parse_args()
    tok = load_deepseek_v4_tokenizer()
    recipe, direct, fast = Tally(), Tally(), Tally()
    anchor = None if args.no_anchor else LLGuidanceDirect(tok)
    t0 = time.perf_counter()
    meta = json.loads((CORPUS.parent / "selection.json").read_text())
    for i, rec in enumerate(load_corpus(CORPUS)):
        if args.limit and i >= args.limit:
            break
        t = run_schema(rec, tok)
        recipe.add(t)
        if in_fast_slice(i, rec["name"]):
            fast.add(t)
        if anchor is not None:
            direct.add(anchor.run(rec, tok))
    wall = time.perf_counter() - t0
    print(f"SchemaStore @ {meta['commit'][:10]}: {recipe.schemas} schemas, {recipe.valid} valid and "
          f"{recipe.invalid} invalid published examples (keys re-ordered to schema order)")
    print(line("recipe (strict=False)", recipe))
    if anchor is not None:
        print(line("llguidance directly", direct))
        fr, fd = recipe.figures(), direct.figures()
        for k in ("compiled_rate", "accepted_rate", "rejected_by_mask_rate"):
            print(f"ratio recipe/llguidance-direct {k}: {fr[k] / fd[k]:.3f}" if fd[k] else f"{k}: direct 0")
    f = recipe.figures()
    met = all(f[k] >= v for k, v in GOALS.items()) and recipe.unsound == 0
    print(f"goals (≥97% compiled, ≥97% accepted, ≥95% rejected, 0 unsound): {'met' if met else 'NOT met'}"
          f"  (wall {wall:.0f} s)")
    if args.failures:
        for x in recipe.failures:
            print("  " + x[:300])
    if args.write_figures:
        FIGURES.write_text(json.dumps({"corpus": meta, "recipe": f, "slice": fast.figures()}, indent=1,
                                      sort_keys=True) + "\n")
        print(f"wrote {FIGURES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
