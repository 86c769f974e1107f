"""Converted golden requests render and encode exactly as the reference did (prompt, ranges, ids)."""

from __future__ import annotations

from typing import Any

import pytest

from recipe.codec import ConversionOptions, convert, encode, render
from recipe.tokenizer import MissingSpecialTokenError, load_deepseek_v4_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_deepseek_v4_tokenizer()


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_golden_prompt_ranges_and_ids(golden: list[dict[str, Any]], tokenizer: Any, api: str) -> None:
    failures = []
    n_ids = 0
    cases = [r for r in golden if r["api"] == api and "error" not in r]
    for rec in cases:
        req = convert(api, rec["request"], ConversionOptions(strict_reference=True))
        rendered = render(req)
        if rendered.prompt != rec["prompt"]:
            failures.append(f"{rec['case_id']}: prompt differs")
            continue
        if [list(r) for r in rendered.special_ranges] != rec["special_ranges"]:
            failures.append(f"{rec['case_id']}: special ranges differ")
            continue
        if len(rendered.image_sources) != len(rec["image_sources"]):
            failures.append(f"{rec['case_id']}: image sources differ")
        if rec["token_ids"] is not None:
            n_ids += 1
            if encode(req, tokenizer) != rec["token_ids"]:
                failures.append(f"{rec['case_id']}: token ids differ")
        elif "v41_encode_error" in rec:
            with pytest.raises(MissingSpecialTokenError) as info:
                encode(req, tokenizer)
            assert str(info.value) == rec["v41_encode_error"]
    assert not failures, f"{len(failures)}/{len(cases)} differ:\n" + "\n".join(failures[:10])
    assert n_ids >= 100
