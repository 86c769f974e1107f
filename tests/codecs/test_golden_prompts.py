"""Every valid golden request (recorded from deepseek-recipe 0.2.0) renders and encodes identically.

Conversion is `recipe.codec.convert`; what this proves is the codec half: prompt text, special ranges,
V4 token ids, and that template-id reuse equals plain encoding on every golden prompt.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from recipe.codec import ConversionOptions, convert, render
from recipe.encoding import encode_rendered, encode_rendered_uncached

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "requests.jsonl.gz"


def _valid_cases() -> list[dict]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return [case for case in map(json.loads, f) if "prompt" in case]


def test_golden_set_is_large_enough() -> None:
    assert len(_valid_cases()) >= 1000


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_golden_prompts_ranges_and_ids(api: str, tokenizer) -> None:
    cases = [c for c in _valid_cases() if c["api"] == api]
    assert cases
    for case in cases:
        rendered = render(convert(api, case["request"], ConversionOptions(strict_reference=True)))
        assert rendered.prompt == case["prompt"], case["case_id"]
        assert [list(r) for r in rendered.special_ranges] == case["special_ranges"], case["case_id"]
        if case.get("token_ids") is not None:
            ids = encode_rendered(rendered, tokenizer)
            assert ids == case["token_ids"], case["case_id"]
            assert ids == encode_rendered_uncached(rendered, tokenizer), case["case_id"]
