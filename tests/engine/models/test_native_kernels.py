"""The native decode attention (`attention_backend="native"`) and RMSNorm (`norm_backend="native"`) equal their
references: the per-sequence SDPA loop and torch's rms_norm; a decode row's attention is bit-identical
whatever else is in the batch; the engine's greedy tokens are the same on and off."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from model_driver import PagedDriver
from recipe.engine import LLM, SamplingParams
from recipe.engine.context import AttentionContext
from recipe.engine.layers.attention import paged_attend
from recipe.engine.layers.attention_plan import build_attention_plan
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.models.registry import load_model

PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11]


def _mixed_steps(drv: PagedDriver) -> list[torch.Tensor]:
    """Decodes of different context lengths beside a fresh prefill and a chunk over a cached prefix."""
    return [
        drv.step([(0, PROMPT)]),
        drv.step([(1, PROMPT[:5])]),
        drv.step([(0, [9]), (1, [70]), (2, PROMPT[2:11])]),
        drv.step([(2, [4]), (0, [81]), (1, PROMPT[6:13]), (3, [1])]),
        drv.step([(1, [3]), (2, [240]), (0, [160]), (3, [2, 8, 9])]),
        drv.step([(3, [5]), (1, [6]), (0, [7]), (2, [8])]),
    ]


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_deepseek_dir"])
def test_native_attention_equals_the_per_sequence_reference(fixture: str, request: pytest.FixtureRequest) -> None:
    model, _ = load_model(request.getfixturevalue(fixture), dtype=torch.float32)
    runs = []
    for backend in ("reference", "native"):
        drv = PagedDriver(model, num_seqs=4, max_len=40, cache_dtype=torch.float32, shuffle_seed=3,
                          attention_backend=backend)
        runs.append(_mixed_steps(drv))
    for ref, got in zip(*runs, strict=True):
        torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-5)


def test_native_attention_outside_fp32_is_the_reference(tiny_llama_dir: Path) -> None:
    model, _ = load_model(tiny_llama_dir, dtype=torch.float64)
    runs = []
    for backend in ("reference", "native"):
        drv = PagedDriver(model, num_seqs=4, max_len=40, cache_dtype=torch.float64, shuffle_seed=5,
                          attention_backend=backend)
        runs.append(_mixed_steps(drv))
    for ref, got in zip(*runs, strict=True):
        assert torch.equal(got, ref)


def _decode(q: torch.Tensor, cache: torch.Tensor, tables: list[list[int]], lens: list[int], backend: str) -> torch.Tensor:
    b = len(lens)
    ctx = AttentionContext(
        query_lens=[1] * b, context_lens_list=lens, cu_seqlens_q=torch.arange(b + 1),
        context_lens=torch.tensor(lens), slot_mapping=torch.zeros(b, dtype=torch.int64),
        block_tables=torch.tensor(tables), block_size=cache.shape[2], attention_backend=backend)
    return paged_attend(q, build_attention_plan(ctx), cache[0], cache[1], 0.125, q.shape[-1])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), batch=st.integers(2, 6), kv_heads=st.sampled_from([1, 2, 3]),
       group=st.sampled_from([1, 3]), dim=st.sampled_from([8, 20, 64]), block=st.sampled_from([1, 4, 16]),
       spread=st.sampled_from([1.0, 30.0]), data=st.data())
def test_native_decode_rows_ignore_the_rest_of_the_batch(seed: int, batch: int, kv_heads: int, group: int, dim: int,
                                                         block: int, spread: float, data: st.DataObject) -> None:
    """Contexts of up to 300 tokens: several of the kernel's 64-token chunks, merged; with `spread` 30 the scores
    span hundreds, so chunks' maxima differ widely and most terms underflow to 0."""
    g = torch.Generator().manual_seed(seed)
    num_blocks = 320
    cache = torch.randn(2, num_blocks, block, kv_heads, dim, generator=g)
    lens = data.draw(st.lists(st.integers(1, 300), min_size=batch, max_size=batch))
    width = max((n + block - 1) // block for n in lens)
    tables = [torch.randperm(num_blocks, generator=g)[:width].tolist() for _ in lens]
    q = torch.randn(batch, kv_heads * group, dim, generator=g) * spread
    together = _decode(q, cache, tables, lens, "native")
    exact = _decode(q.double(), cache.double(), tables, lens, "reference")
    # Against float64: an fp32 score's rounding error grows with its size, so with `spread` 30 torch's own fp32
    # reference is off by up to ~2e-5 (native ~1.4e-5; 200 seeds), at spread 1 both by ~6e-7.
    torch.testing.assert_close(together.double(), exact, atol=2e-6 * spread, rtol=2e-6 * spread)
    for i in range(batch):
        alone = _decode(q[i : i + 1], cache, tables[i : i + 1], lens[i : i + 1], "native")
        assert torch.equal(alone[0], together[i])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 20), size=st.integers(1, 300),
       spread=st.sampled_from([1e-3, 1.0, 1e3]))
def test_native_rms_norm_equals_torch(seed: int, rows: int, size: int, spread: float) -> None:
    g = torch.Generator().manual_seed(seed)
    norm = RMSNorm(size, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(size, generator=g))
    x = torch.randn(rows, size, generator=g) * spread
    norm.backend = "native"
    got = norm(x)
    torch.testing.assert_close(got, F.rms_norm(x, (size,), norm.weight, 1e-5), atol=1e-6, rtol=1e-5)


def test_engine_greedy_tokens_equal_with_native_kernels_on_and_off(tiny_llama_dir: Path) -> None:
    prompts = [PROMPT, PROMPT[:7], [9, 8, 7, 6, 5, 4, 3, 2, 1, 250, 251]]
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, logprobs=1)
    config = {"dtype": "float32", "num_threads": 1, "num_kv_blocks": 40, "block_size": 4, "max_num_batched_tokens": 8}
    runs = []
    for backends in ({"attention_backend": "reference", "norm_backend": "torch"},
                     {"attention_backend": "native", "norm_backend": "native"}):
        llm = LLM(str(tiny_llama_dir), **config, **backends)
        runs.append(llm.generate(prompts, params))
        llm.shutdown()
    ref, got = runs
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in ref]
    for a, b in zip(got, ref, strict=True):
        assert a.new_logprobs is not None and b.new_logprobs is not None
        for x, y in zip(a.new_logprobs, b.new_logprobs, strict=True):
            assert x is not None and y is not None
            assert x[0] == pytest.approx(y[0], abs=1e-4)
