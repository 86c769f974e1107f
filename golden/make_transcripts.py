"""Regenerate golden/transcripts/stream.jsonl.gz: reference stream transcripts for generated model outputs.

Each case is a request body (Chat, Messages or Responses), a backend update sequence (text updates, or
token-id updates of random granularity with the V4 tokenizer, optionally with logprobs) and what the
official `deepseek-recipe` stream processor produced for it: every event (SSE name + JSON data) and the
accumulated complete body. The cases come from the stream differential generator
(tests/stream/stream_differential.py, well-formed markup only), which is also where the reference is run.
Run: `.venv/bin/python golden/make_transcripts.py [--count N] [--seed S]`.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "golden" / "transcripts" / "stream.jsonl.gz"


def differential() -> ModuleType:
    """tests/stream/stream_differential.py: the case generator and the reference runner."""
    name = "stream_differential"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "stream" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=360)
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args()
    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer

    gen = differential()
    tok = load_deepseek_v4_tokenizer()
    ref_tok = dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path()))
    rng = random.Random(args.seed)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    written = rejected = 0
    with gzip.open(OUT, "wt", encoding="utf-8") as fh:
        for i in range(args.count):
            case = gen.make_case(rng, i, broken=False)
            upds = gen.updates(case, tok)
            reference = gen.run_reference(case, upds, ref_tok)
            if "error" in reference:  # the golden corpus holds completed streams only
                rejected += 1
                continue
            case["updates"] = upds
            case["reference"] = reference
            fh.write(json.dumps(case, ensure_ascii=False) + "\n")
            written += 1
    print(f"wrote {written} cases to {OUT} ({rejected} the reference rejected were left out)")


if __name__ == "__main__":
    main()
