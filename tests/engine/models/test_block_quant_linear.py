"""The block-quantised linears (q8_0, q4_1) on the native kernels equal their torch reference: activations
rounded through Q8_0 blocks times the dequantised weight, at every batch size; each row's result does not
depend on its batch (bit for bit, also where rows share unpacked weight blocks in tiles of four); the engine
gives the same tokens with and without the native library."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine import LLM, SamplingParams
from recipe.engine.kernels.native import library
from recipe.engine.layers import block_quant_linear
from recipe.engine.layers.block_quant_linear import QK, Q4_1Linear, Q8_0Linear, round_activations

KINDS = {"q8_0": Q8_0Linear, "q4_1": Q4_1Linear}


def test_the_native_library_builds_here() -> None:
    assert library() is not None, "a C compiler is on this machine: the native kernels must build"


def _reference(layer: Q8_0Linear | Q4_1Linear, x: torch.Tensor) -> torch.Tensor:
    y = F.linear(round_activations(x).double(), layer.dequantized().double())
    return y if layer.bias is None else y + layer.bias.double()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 40), n=st.integers(1, 70),
       blocks=st.integers(1, 6), kind=st.sampled_from(sorted(KINDS)), bias=st.booleans(),
       spread=st.sampled_from([1e-3, 1.0, 50.0]))
def test_block_quant_linear_equals_rounded_activations_times_dequantised_weight(
        seed: int, rows: int, n: int, blocks: int, kind: str, bias: bool, spread: float) -> None:
    g = torch.Generator().manual_seed(seed)
    k = QK * blocks
    w = torch.randn(n, k, generator=g) * spread
    w[:, :QK] = 0.0 if seed % 5 == 0 else w[:, :QK]  # an all-zero block: scale 0
    x = torch.randn(rows, k, generator=g) * spread
    layer = KINDS[kind](w, torch.randn(n, generator=g) if bias else None)
    got = layer(x)
    ref = _reference(layer, x)
    scale = (x.abs().sum(dim=1, keepdim=True) * w.abs().amax() + 1).double()
    assert ((got.double() - ref).abs() / scale).max() < 1e-6


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(2, 40), n=st.integers(1, 70), blocks=st.integers(1, 5),
       kind=st.sampled_from(sorted(KINDS)), start=st.integers(0, 39))
def test_a_rows_result_does_not_depend_on_its_batch(seed: int, rows: int, n: int, blocks: int, kind: str,
                                                    start: int) -> None:
    """Every row of a batch (tiles of four and the rest; weight groups of four and the tail) equals the row
    alone and the row inside another batch that starts elsewhere (so it falls in another tile position)."""
    g = torch.Generator().manual_seed(seed)
    layer = KINDS[kind](torch.randn(n, blocks * QK, generator=g))
    x = torch.randn(rows, blocks * QK, generator=g)
    together = layer(x)
    start = start % rows
    shifted = layer(x[start:])
    for i in range(rows):
        assert torch.equal(layer(x[i : i + 1])[0], together[i])
        if i >= start:
            assert torch.equal(shifted[i - start], together[i])


def test_quantised_weights_are_within_half_a_step() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 4 * QK, generator=g)
    blocks = w.view(64, 4, QK)
    q8 = Q8_0Linear(w).dequantized().view(64, 4, QK)
    assert ((q8 - blocks).abs() <= blocks.abs().amax(-1, keepdim=True) / 127 / 2 + 1e-6).all()
    q4 = Q4_1Linear(w).dequantized().view(64, 4, QK)
    step = (blocks.amax(-1, keepdim=True) - blocks.amin(-1, keepdim=True)) / 15
    assert ((q4 - blocks).abs() <= step / 2 + 1e-5).all()


def test_q4_1_keeps_gguf_q4_1_blocks() -> None:
    """A GGUF Q4_1 block (value = d * q + m, d and m stored in fp16, q using 0 and 15) comes back as it was."""
    g = torch.Generator().manual_seed(1)
    n, k = 32, 4 * QK
    q = torch.randint(0, 16, (n, k // QK, QK), generator=g)
    q[..., 0], q[..., 1] = 0, 15
    d = torch.rand(n, k // QK, 1, generator=g).half().float() * 0.1 + 1e-3
    m = -torch.rand(n, k // QK, 1, generator=g).half().float()
    w = (d * q + m).view(n, k)
    torch.testing.assert_close(Q4_1Linear(w).dequantized(), w, atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pure_torch_fallback_equals_the_native_kernels(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(2)
    layer = KINDS[kind](torch.randn(40, 2 * QK, generator=g))
    x = torch.randn(5, 2 * QK, generator=g)
    native = layer(x)
    monkeypatch.setattr(block_quant_linear, "library", lambda: None)
    torch.testing.assert_close(layer(x), native, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("weight_format", ["q8_0", "q4_1"])
def test_engine_tokens_equal_with_and_without_the_native_library(
        tiny_llama_dir: Path, weight_format: str, monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = [[5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11], [9, 8, 7, 6, 5, 4, 3]]
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True, logprobs=1)
    config = {"dtype": "float32", "num_threads": 1, "num_kv_blocks": 32, "block_size": 4, "weight_format": weight_format}
    runs = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr(block_quant_linear, "library", lambda: None)
        llm = LLM(str(tiny_llama_dir), **config)
        assert llm.engine.model.logits_head is not None
        runs.append(llm.generate(prompts, params))
        llm.shutdown()
    got, ref = runs
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in ref]
    for a, b in zip(got, ref, strict=True):
        assert a.new_logprobs is not None and b.new_logprobs is not None
        for x, y in zip(a.new_logprobs, b.new_logprobs, strict=True):
            assert x is not None and y is not None
            assert x[0] == pytest.approx(y[0], abs=1e-4)
