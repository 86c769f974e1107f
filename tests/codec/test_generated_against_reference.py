"""Freshly generated request bodies (seeds other than the golden set's) convert, render and encode
exactly as the official reference does: a live differential test beyond the committed vectors.

The default run checks 40 bodies per API; `-m slow` checks 1,000 per API.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import pytest

from recipe.codec import convert, encode, render
from recipe.errors import RequestError
from recipe.tokenizer import load_deepseek_v4_tokenizer

MAKE_VECTORS = Path(__file__).resolve().parents[2] / "golden" / "make_vectors.py"


@pytest.fixture(scope="module")
def make_vectors() -> Any:
    spec = importlib.util.spec_from_file_location("make_vectors", MAKE_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def encodings(make_vectors: Any) -> dict[str, Any]:
    import deepseek_recipe as dr

    tok = make_vectors._tokenizer()
    return {"V4": dr.DeepseekV4Encoding().with_tokenizer(tok), "V41": dr.DeepseekV41Encoding().with_tokenizer(tok)}


def check(api: str, count: int, seed: str, make_vectors: Any, encodings: dict[str, Any], outcomes: Any) -> None:
    rng = random.Random(seed)
    tokenizer = load_deepseek_v4_tokenizer()
    failures = []
    for i in range(count):
        text = json.dumps(make_vectors.GENERATORS[api](rng), ensure_ascii=False)
        ref = make_vectors.run_reference(api, text, encodings)
        if "error" in ref:
            if ref["error"]["message"].startswith("Invalid n value"):
                continue  # documented divergence
            try:
                convert(api, text)
            except RequestError as exc:
                if (exc.status, exc.message) == (ref["error"]["status"], ref["error"]["message"]):
                    continue
            failures.append(f"#{i}: reference rejects with {ref['error']['message']!r}")
            continue
        req = convert(api, text)
        view = outcomes.view(req)
        diff = outcomes.diff(view, {k: ref[k] for k in view})
        rendered = render(req)
        if diff:
            failures.append(f"#{i}: {diff}")
        elif rendered.prompt != ref["prompt"] or [list(r) for r in rendered.special_ranges] != ref["special_ranges"]:
            failures.append(f"#{i}: prompt or special ranges differ")
        elif ref["token_ids"] is not None and encode(req, tokenizer) != ref["token_ids"]:
            failures.append(f"#{i}: token ids differ")
    assert not failures, f"{len(failures)}/{count} differ (seed {seed}):\n" + "\n".join(failures[:10])


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_generated_bodies_match_the_reference(api: str, make_vectors: Any, encodings: dict[str, Any], outcomes: Any) -> None:
    check(api, 40, f"recipe-differential-{api}", make_vectors, encodings, outcomes)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_many_generated_bodies_match_the_reference(api: str, make_vectors: Any, encodings: dict[str, Any], outcomes: Any) -> None:
    check(api, 1000, f"recipe-differential-slow-{api}", make_vectors, encodings, outcomes)
