"""`linear_backend="few-rows"` (engine/layers/few_rows_linear.py) equals `F.linear`, and the engine's greedy
tokens are the same with it on or off, with speculation on or off (its verify steps are what it speeds up)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from recipe.engine import LLM, SamplingParams
from recipe.engine.layers.block_quant_linear import Q8_0Linear
from recipe.engine.layers.few_rows_linear import FewRowsLinear, few_rows_linear, use_few_rows_linears
from torch import nn


@pytest.mark.parametrize("shape", [(96, 64), (64, 160)])  # out >= in, and out < in
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 6, 7, 20])
def test_few_rows_linear_equals_f_linear(shape: tuple[int, int], rows: int) -> None:
    g = torch.Generator().manual_seed(rows)
    w, b = torch.randn(*shape, generator=g), torch.randn(shape[0], generator=g)
    x = torch.randn(rows, shape[1], generator=g)
    torch.testing.assert_close(few_rows_linear(x, w, b), F.linear(x, w, b), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(few_rows_linear(x[None], w), F.linear(x[None], w), atol=1e-5, rtol=1e-5)
    assert few_rows_linear(x, w).is_contiguous()
    assert torch.equal(few_rows_linear(x.double(), w.double()), F.linear(x.double(), w.double()))  # fp32 only


@torch.no_grad()
def test_only_plain_linears_are_swapped() -> None:
    model = nn.Sequential(nn.Linear(64, 32), Q8_0Linear(torch.randn(32, 32)), nn.Linear(32, 8, bias=False))
    x = torch.randn(3, 64)
    before = model(x)
    assert use_few_rows_linears(model) == 2
    assert [type(m) for m in model] == [FewRowsLinear, Q8_0Linear, FewRowsLinear]
    torch.testing.assert_close(model(x), before, atol=1e-5, rtol=1e-5)


def test_greedy_tokens_equal_with_few_rows_on_and_off_with_speculation(tiny_llama_dir: Path, tmp_path: Path) -> None:
    prompts = [[5, 17, 42, 99, 3, 5, 17, 42], [250, 7, 7, 128, 64, 250, 7], [33, 200, 11, 33, 200, 11, 9],
               [1, 2, 3, 4, 1, 2, 3]]
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    config = {"dtype": "float32", "num_threads": 1, "num_kv_blocks": 64, "block_size": 4}
    # auto with a step cost in which more positions cost nothing: it drafts whatever the load (a profile taken
    # under heavy load can make it draft nothing, and the drafts > 0 check below would fail)
    flat = tmp_path / "flat_cost.json"
    flat.write_text('{"intercept": 0.01, "per_seq": 0.0, "per_token": 0.0}')
    runs = {}
    for name, extra in [("torch", {}), ("few-rows", {"linear_backend": "few-rows"}),
                        ("few-rows, ngram k=3", {"linear_backend": "few-rows", "speculative": "ngram",
                                                 "num_speculative_tokens": 3}),
                        ("few-rows, ngram auto", {"linear_backend": "few-rows", "speculative": "ngram",
                                                  "speculative_cost_model": str(flat), "speculative_cost_cells": False})]:
        llm = LLM(str(tiny_llama_dir), **config, **extra)
        runs[name] = [o.new_token_ids for o in llm.generate(prompts, params)]
        if "speculative" in extra:
            assert llm.engine.stats().speculative.draft_tokens > 0
        if extra:
            assert isinstance(llm.engine.runner.model.layers[0].mlp.down, FewRowsLinear)
            assert llm.engine.runner.model.few_rows_logits
        llm.shutdown()
    for name, tokens in runs.items():
        assert tokens == runs["torch"], name
