"""Fresh generated cases against the live official reference (the dev-only oracle `deepseek-recipe`).

tests/stream/stream_differential.py builds request bodies for the three APIs and adversarial model
outputs (broken or cross-version DSML markup, stray text between tags, cut blocks, JSON mode with stop
strings, specials, random splits, random top-logprob ids), runs Recipe's own chain
(`recipe.codec.convert` → `StreamProcessor`) and the reference's, and compares every event and the
complete response. A short run is in the default suite; a long one on fresh seeds under `-m slow`.
"""

from __future__ import annotations

import random
from typing import Any

import pytest


def _check(seed: int, count: int, broken: bool, differential: Any, tokenizer: Any, ref_tokenizer: Any) -> None:
    rng = random.Random(seed)
    failures = []
    for i in range(count):
        case = differential.make_case(rng, i, broken=broken)
        diff = differential.compare(case, tokenizer, ref_tokenizer)
        if diff:
            failures.append((i, case["api"], case["feed"], case["output"][:80], diff[:300]))
    assert not failures, f"seed {seed}: {len(failures)} of {count} differ: {failures[:3]}"


@pytest.mark.parametrize(("seed", "broken"), [(31337, False), (4242, True)])
def test_fresh_cases_equal_live_reference(
    seed: int, broken: bool, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    _check(seed, 120, broken, differential, v4_tokenizer, reference_tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True, True, True])
def test_many_fresh_cases_equal_live_reference(
    broken: bool, differential: Any, v4_tokenizer: Any, reference_tokenizer: Any
) -> None:
    seed = random.SystemRandom().randrange(1 << 32)  # fresh cases on every run; the seed is in the failure
    _check(seed, 1000, broken, differential, v4_tokenizer, reference_tokenizer)
