"""Each speed path equals its reference path (the off switch in `EngineConfig`): batched paged attention vs
one call per sequence, grouped MoE vs the expert loop, quantised linears vs the same weights dequantised."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from model_driver import PagedDriver
from recipe.engine import LLM, SamplingParams
from recipe.engine.layers import routed_experts
from recipe.engine.layers.moe import GroupedTopKRouter, MoE
from recipe.engine.layers.quantized_linear import (
    GROUP,
    Int4Linear,
    Int8Linear,
    int4_dequantize,
    int4_quantize,
)
from recipe.engine.models.registry import load_model
from torch import nn

PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11]


def _mixed_steps(drv: PagedDriver) -> list[torch.Tensor]:
    """Decodes of different context lengths beside a fresh prefill and a chunk over a cached prefix."""
    return [
        drv.step([(0, PROMPT)]),
        drv.step([(1, PROMPT[:5])]),
        drv.step([(0, [9]), (1, [70]), (2, PROMPT[2:11])]),
        drv.step([(2, [4]), (0, [81]), (1, PROMPT[6:13]), (3, [1])]),
        drv.step([(1, [3]), (2, [240]), (0, [160]), (3, [2, 8, 9])]),
    ]


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_deepseek_dir", "tiny_deepseek_yarn_dir"])
def test_batched_attention_equals_the_per_sequence_reference(fixture: str, request) -> None:
    model, _ = load_model(request.getfixturevalue(fixture), dtype=torch.float64)
    runs = []
    for backend in ("reference", "batched"):
        drv = PagedDriver(model, num_seqs=4, max_len=40, cache_dtype=torch.float64, shuffle_seed=3,
                          attention_backend=backend)
        runs.append(_mixed_steps(drv))
    for ref, got in zip(*runs, strict=True):
        torch.testing.assert_close(got, ref, atol=1e-10, rtol=0)


def _moe(seed: int, hidden: int, experts: int, top_k: int, groups: int) -> MoE:
    g = torch.Generator().manual_seed(seed)
    router = GroupedTopKRouter(hidden, experts, top_k, groups, max(1, groups // 2), True, 2.5)
    moe = MoE(hidden, 8, experts, 1, router).double()
    with torch.no_grad():
        for p in moe.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
        router.e_score_correction_bias.copy_(torch.randn(experts, generator=g) * 0.1)
    return moe


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), tokens=st.integers(1, 40), experts=st.sampled_from([8, 16]),
       top_k=st.integers(1, 4), groups=st.sampled_from([1, 2, 4]))  # >= 2 experts per group, as V3
def test_grouped_moe_equals_the_expert_loop(seed: int, tokens: int, experts: int, top_k: int, groups: int) -> None:
    """Both grouped ways: gathered weights per row (small experts, or few rows) and the grouping by expert."""
    moe = _moe(seed, 16, experts, top_k, groups)
    x = torch.randn(tokens, 16, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    small = routed_experts._SMALL_GATHER
    with torch.inference_mode():
        moe.backend = "loop"
        ref = moe(x)
        moe.backend = "grouped"
        gathered = moe(x)
        try:
            routed_experts._SMALL_GATHER = 0  # only few rows (at most half the experts) gather now
            grouped = moe(x)
        finally:
            routed_experts._SMALL_GATHER = small
    torch.testing.assert_close(gathered, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(grouped, ref, atol=1e-12, rtol=0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 9), out_blocks=st.integers(1, 4), groups=st.integers(1, 4))
def test_quantised_linears_equal_their_dequantised_weights(seed: int, rows: int, out_blocks: int, groups: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n, k = 16 * out_blocks, GROUP * groups
    w, x, b = torch.randn(n, k, generator=g), torch.randn(rows, k, generator=g), torch.randn(n, generator=g)
    q8 = Int8Linear(w, b)
    torch.testing.assert_close(q8(x), F.linear(x, q8.dequantized(), b), atol=1e-4, rtol=1e-5)
    assert (q8.dequantized() - w).abs().max() <= w.abs().amax(dim=1).max() / 127 / 2 + 1e-6
    q4 = Int4Linear(w, b)
    deq = int4_dequantize(*int4_quantize(w))
    torch.testing.assert_close(q4(x), F.linear(x, deq, b), atol=1e-4, rtol=1e-5)


def test_int4_holds_gguf_q4_1_blocks_exactly() -> None:
    """Q4_1: value = d * q + m per block of 32, q in 0..15 with both ends used; int4 re-expresses it."""
    g = torch.Generator().manual_seed(0)
    n, k = 32, 4 * GROUP
    q = torch.randint(0, 16, (n, k // GROUP, GROUP), generator=g)
    q[..., 0], q[..., 1] = 0, 15
    d = torch.rand(n, k // GROUP, 1, generator=g).half().float() * 0.1 + 1e-3
    m = -torch.rand(n, k // GROUP, 1, generator=g).half().float()
    w = (d * q + m).view(n, k)
    torch.testing.assert_close(int4_dequantize(*int4_quantize(w)), w, atol=1e-6, rtol=0)


def _dequantised_copy(model: nn.Module, weight_format: str) -> None:
    """Put into every decoder linear the weights its quantised form stands for (the reference path)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name.startswith("layers.") and not name.endswith("kv_b_proj"):
            w = module.weight.data
            if weight_format == "int8":
                module.weight.data = Int8Linear(w).dequantized().to(w.dtype)
            else:
                module.weight.data = int4_dequantize(*int4_quantize(w)).to(w.dtype)


@pytest.mark.parametrize("weight_format", ["int8", "int4"])
def test_quantised_engine_equals_the_dequantised_reference(tiny_llama_dir: Path, weight_format: str) -> None:
    prompts = [PROMPT, PROMPT[:7], [9, 8, 7, 6, 5, 4, 3, 2, 1, 250, 251]]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=1)
    config = {"dtype": "float32", "num_threads": 1, "num_kv_blocks": 32, "block_size": 4}
    quant = LLM(str(tiny_llama_dir), weight_format=weight_format, **config)
    got = quant.generate(prompts, params)
    quant.shutdown()
    model, info = load_model(tiny_llama_dir)
    _dequantised_copy(model, weight_format)
    head = model.lm_head.weight.data
    model.lm_head.weight.data = Int8Linear(head).dequantized()
    ref_llm = LLM((model, info), **config)
    ref = ref_llm.generate(prompts, params)
    ref_llm.shutdown()
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in ref]
    for a, b in zip(got, ref, strict=True):
        assert a.new_logprobs is not None and b.new_logprobs is not None
        for x, y in zip(a.new_logprobs, b.new_logprobs, strict=True):
            assert x is not None and y is not None
            assert x[0] == pytest.approx(y[0], abs=1e-3)
