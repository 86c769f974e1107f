"""Fresh generated cases against the live official reference (the dev-only oracle `deepseek-recipe`).

The same generator as golden/make_transcripts.py, with other seeds: every event and the complete
response must equal the reference's. A short run is in the default suite, a long one under `-m slow`.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_transcripts", ROOT / "golden" / "make_transcripts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_transcripts"] = module
    spec.loader.exec_module(module)
    return module


def _check(seed: int, count: int, harness: Any, tokenizer: Any) -> None:
    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path

    gen = _generator()
    ref_tok = dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path()))
    rng = random.Random(seed)
    failures = []
    for i in range(count):
        case = gen.make_case(rng, i)
        case["updates"] = gen.updates(case, tokenizer)
        case["reference"] = gen.run_reference(case, case["updates"], ref_tok)
        proc, events = harness.run_ours(case, tokenizer)
        same_events = harness.normalise(harness.event_dicts(events)) == harness.normalise(case["reference"]["events"])
        same_body = harness.normalise(proc.response()) == harness.normalise(case["reference"]["response"])
        if not (same_events and same_body):
            failures.append((i, case["api"], case["kind"], case["feed"], case["output"][:80]))
    assert not failures, failures[:5]


def test_fresh_cases_equal_live_reference(harness: Any, v4_tokenizer: Any) -> None:
    _check(seed=31337, count=90, harness=harness, tokenizer=v4_tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_many_fresh_cases_equal_live_reference(seed: int, harness: Any, v4_tokenizer: Any) -> None:
    _check(seed=seed, count=1000, harness=harness, tokenizer=v4_tokenizer)
