"""Non-default conversion options convert every golden body exactly as the official reference does
with the same options (live differential test; the reference is the dev-only deepseek-recipe 0.2.0)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from recipe.codec import ConversionOptions
from recipe.conversation import ModelVersion

MAKE_VECTORS = Path(__file__).resolve().parents[2] / "golden" / "make_vectors.py"


@pytest.fixture(scope="module")
def make_vectors() -> Any:
    spec = importlib.util.spec_from_file_location("make_vectors", MAKE_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def option_sets(dr: Any) -> dict[str, tuple[Any, ConversionOptions]]:
    return {
        "thinking off, small bounds": (
            dr.ConversionOptions(
                default_thinking_mode=False, thinking_max_tokens_upper_bound=1000, non_thinking_max_tokens_upper_bound=2000
            ),
            ConversionOptions(
                default_thinking_mode=False, thinking_max_tokens_upper_bound=1000, non_thinking_max_tokens_upper_bound=2000,
                strict_reference=True,
            ),
        ),
        "reject reasoning, swap web search": (
            dr.ConversionOptions(
                reasoning_content_behavior=dr.ReasoningContentBehavior.Reject,
                responses_web_search=dr.WebSearchBehavior.Reject,
                messages_web_search=dr.WebSearchBehavior.Drop,
            ),
            ConversionOptions(reasoning_content_behavior="reject", responses_web_search="reject", messages_web_search="drop",
                              strict_reference=True),
        ),
        "aliases": (
            dr.ConversionOptions()
            .with_model_alias("DeepSeek-V4-Pro", dr.ModelVersion.DeepseekV41Flash)
            .with_model_alias("ds", dr.ModelVersion.DeepseekV4Pro),
            ConversionOptions(strict_reference=True)
            .with_model_alias("DeepSeek-V4-Pro", ModelVersion.V41).with_model_alias("ds", ModelVersion.V4),
        ),
    }


@pytest.mark.parametrize("name", ["thinking off, small bounds", "reject reasoning, swap web search", "aliases"])
def test_options_match_the_reference(golden: list[dict[str, Any]], outcomes: Any, make_vectors: Any, name: str) -> None:
    import deepseek_recipe as dr

    from recipe.codec import convert
    from recipe.errors import RequestError

    ref_options, options = option_sets(dr)[name]
    failures = []
    for rec in golden:
        expected = make_vectors.run_reference(rec["api"], rec["request"], None, ref_options)
        if "error" in expected and expected["error"]["message"] == "Invalid n value (currently only n = 1 is supported)":
            continue  # documented divergence, covered by the golden test
        try:
            actual: dict[str, Any] = {"ok": outcomes.view(convert(rec["api"], rec["request"], options))}
        except RequestError as exc:
            actual = {"error": {"status": exc.status, "message": exc.message, "kind": exc.kind}}
        keys = ("model_version", "stream", "conversation", "inference", "parsing")
        want = {"error": expected["error"]} if "error" in expected else {"ok": {k: expected[k] for k in keys}}
        diff = outcomes.diff(actual, want)
        if diff:
            failures.append(f"{rec['case_id']}: {diff}")
    assert not failures, f"{len(failures)} differ:\n" + "\n".join(failures[:10])
