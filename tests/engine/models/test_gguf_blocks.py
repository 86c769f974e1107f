"""GGUF block formats read exactly (against gguf-py's own `dequantize`) and multiplied natively on the blocks
(against the fp64 product of the dequantised weight with the activations as given, or Q8_0-rounded, and, for the
32-weight formats, against a numpy model of llama.cpp's integer block dot)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as gguf_dequantize
from hypothesis import given, settings
from hypothesis import strategies as st
from kquant_encode import encode
from recipe.engine.kernels.native import library
from recipe.engine.layers.block_quant_linear import Q4_1Linear, Q8_0Linear, round_activations
from recipe.engine.layers.gguf_blocks import dequantize
from recipe.engine.layers.gguf_linear import GGUFLinear, file_linear

TYPES = [T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_0, T.Q4_1, T.Q4_0, T.Q5_0, T.Q5_1]
LEGACY = [T.Q4_0, T.Q5_0, T.Q5_1]  # blocks of 32 with a 4-bit q and, in Q5_*, a fifth bit per weight in qh
needs_native = pytest.mark.skipif(library() is None, reason="no C compiler: the native kernels are not built")


def _raw(qtype: T, n: int, k: int, seed: int) -> torch.Tensor:
    w = np.random.default_rng(seed).normal(0, 0.05, (n, k)).astype(np.float32)
    w[0, :] = 0.0  # an all-zero row: scales 0
    return torch.from_numpy(np.ascontiguousarray(encode(w, qtype)))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_dequantize_equals_gguf_py_exactly(qtype: T) -> None:
    raw = _raw(qtype, 9, 512, 1)
    ours = dequantize(raw, int(qtype), 512)
    oracle = torch.from_numpy(np.asarray(gguf_dequantize(raw.numpy(), qtype), dtype=np.float32).copy())
    assert torch.equal(ours, oracle.reshape(9, 512))


def test_dequantize_reads_random_bytes_as_gguf_py_does() -> None:
    """Any byte pattern (every scale/min bit, negative Q6_K scales), not only what the test encoder writes; f16
    fields kept finite."""
    rng = np.random.default_rng(5)
    for qtype, nbytes, f16_at in ((T.Q4_K, 144, (0, 2)), (T.Q5_K, 176, (0, 2)), (T.Q6_K, 210, (208,)),
                                  (T.Q4_0, 18, (0,)), (T.Q5_0, 22, (0,)), (T.Q5_1, 24, (0, 2))):
        blocks = 512 // (32 if nbytes < 30 else 256)
        raw = rng.integers(0, 256, (6, blocks * nbytes), dtype=np.uint8)
        for blk in range(blocks):
            for off in f16_at:
                raw[:, blk * nbytes + off: blk * nbytes + off + 2] = (
                    np.float16(rng.uniform(-0.01, 0.01)).reshape(1).view(np.uint8))
        ours = dequantize(torch.from_numpy(raw), int(qtype), 512)
        oracle = np.asarray(gguf_dequantize(raw, qtype), dtype=np.float32).reshape(6, 512)
        assert torch.equal(ours, torch.from_numpy(oracle.copy())), qtype.name


@needs_native
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 3, 8, 70])
@pytest.mark.parametrize("round_x", [False, True], ids=["fp32-x", "q8_0-x"])
def test_native_product_on_the_blocks_matches_the_dequantised_product(qtype: T, m: int, round_x: bool) -> None:
    n, k = 37, 512  # 37: a last group of one row
    layer = GGUFLinear([(int(qtype), _raw(qtype, n, k, 2))], k, round_x=round_x)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    ref = F.linear((round_activations(x) if round_x else x).double(), layer.dequantized().double()).float()
    got = layer(x)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@needs_native
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("round_x", [False, True], ids=["fp32-x", "q8_0-x"])
def test_a_row_gets_the_same_bits_whatever_the_batch(qtype: T, round_x: bool) -> None:
    layer = GGUFLinear([(int(qtype), _raw(qtype, 21, 256, 3))], 256, round_x=round_x)
    x = torch.randn(130, 256, generator=torch.Generator().manual_seed(7))
    whole = layer(x)
    for i in (0, 5, 64, 129):
        assert torch.equal(layer(x[i: i + 1]), whole[i: i + 1])


@needs_native
def test_parts_of_different_formats_write_their_own_columns() -> None:
    """A fused q/k/v of a Q4_K_M file: q, k in Q4_K, v in Q6_K; with a bias."""
    parts = [(int(T.Q4_K), _raw(T.Q4_K, 16, 256, 4)), (int(T.Q4_K), _raw(T.Q4_K, 8, 256, 5)),
             (int(T.Q6_K), _raw(T.Q6_K, 8, 256, 6))]
    bias = torch.randn(32)
    x = torch.randn(5, 256)
    for round_x in (False, True):
        layer = GGUFLinear(parts, 256, bias, round_x)
        singles = [GGUFLinear([p], 256, round_x=round_x)(x) for p in parts]
        assert torch.equal(layer(x), torch.cat(singles, dim=1) + bias)


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_1], ids=lambda t: t.name)
def test_q8_0_and_q4_1_files_become_the_block_layers_with_the_files_values(qtype: T) -> None:
    """With rounded activations (the fused step's arithmetic); with fp32 activations they stay GGUFLinear."""
    raw = _raw(qtype, 12, 256, 8)
    layer = file_linear([(int(qtype), raw[:4]), (int(qtype), raw[4:])], 256, round_x=True)
    assert isinstance(layer, Q8_0Linear if qtype == T.Q8_0 else Q4_1Linear)
    assert torch.equal(layer.dequantized(), dequantize(raw, int(qtype), 256))
    x = torch.randn(3, 256)
    torch.testing.assert_close(layer(x), GGUFLinear([(int(qtype), raw)], 256, round_x=True)(x), rtol=1e-5, atol=1e-6)
    assert isinstance(file_linear([(int(qtype), raw)], 256), GGUFLinear)


def llama_cpp_dot(x: np.ndarray, raw: np.ndarray, qtype: T) -> np.ndarray:
    """y [m, n] as llama.cpp's vec_dot of a 32-weight format with Q8_0-rounded x: per block, the integer dot of the
    stored q (q - 8 / q - 16 for Q4_0 / Q5_0) with x's int8 q, times d * dx, plus m * dx * sum(qx) (Q4_1, Q5_1),
    summed over blocks in fp64. The bits are read here with numpy from the layout, not through gguf-py."""
    n, k = raw.shape[0], x.shape[1]
    nbytes = {T.Q4_0: 18, T.Q4_1: 20, T.Q5_0: 22, T.Q5_1: 24}[qtype]
    b = raw.reshape(n, k // 32, nbytes)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    offset = qtype in (T.Q4_1, T.Q5_1)
    m = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64) if offset else np.zeros_like(d)
    at = 4 if offset else 2
    high = np.zeros((n, k // 32, 32), dtype=np.int64)
    if qtype in (T.Q5_0, T.Q5_1):
        qh = b[..., at: at + 4].copy().view("<u4")[..., 0].astype(np.int64)
        high = ((qh[..., None] >> np.arange(32)) & 1) << 4
        at += 4
    qs = b[..., at:].astype(np.int64)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=-1) | high
    q -= {T.Q4_0: 8, T.Q5_0: 16}.get(qtype, 0)
    xb = x.astype(np.float32).reshape(x.shape[0], k // 32, 32)
    dx = np.abs(xb).max(axis=-1) / np.float32(127)
    inv = np.where(dx > 0, np.float32(1) / np.where(dx > 0, dx, 1), 0).astype(np.float32)
    qx = np.clip(np.rint(xb * inv[..., None]), -127, 127).astype(np.int64)
    isum = np.einsum("nbj,mbj->mnb", q, qx)
    return (np.einsum("mnb,nb,mb->mn", isum.astype(np.float64), d, dx.astype(np.float64))
            + np.einsum("nb,mb->mn", m, dx.astype(np.float64) * qx.sum(-1)))


@needs_native
@settings(max_examples=40, deadline=None)
@given(qtype=st.sampled_from([*LEGACY, T.Q4_1]), n=st.integers(1, 19), blocks=st.integers(1, 20),
       m=st.integers(1, 9), seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([0.0, 0.02, 1.0]))
def test_legacy_formats_on_random_shapes(qtype: T, n: int, blocks: int, m: int, seed: int, scale: float) -> None:
    """fp32 activations: x @ W (W gguf-py's dequantised values) to fp32 rounding; Q8_0-rounded activations: llama.cpp's
    integer block dot; every row alone gets the batch's bits. An all-zero weight (scale 0) too."""
    k = 32 * blocks
    rng = np.random.default_rng(seed)
    raw_np = np.ascontiguousarray(encode(rng.normal(0, 0.05, (n, k)).astype(np.float32) * scale, qtype))
    raw = torch.from_numpy(raw_np)
    x = torch.from_numpy(rng.normal(0, 1, (m, k)).astype(np.float32))
    w = np.asarray(gguf_dequantize(raw_np, qtype), dtype=np.float64).reshape(n, k)
    ref = x.double().numpy() @ w.T
    exact = GGUFLinear([(int(qtype), raw)], k)(x)
    np.testing.assert_allclose(exact.numpy(), ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))
    rounded_layer = GGUFLinear([(int(qtype), raw)], k, round_x=True)
    rounded = rounded_layer(x)
    dot = llama_cpp_dot(x.numpy(), raw_np, qtype)
    np.testing.assert_allclose(rounded.numpy(), dot, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(dot).max())))
    for i in range(m):
        assert torch.equal(GGUFLinear([(int(qtype), raw)], k)(x[i: i + 1]), exact[i: i + 1])
        assert torch.equal(rounded_layer(x[i: i + 1]), rounded[i: i + 1])


@needs_native
def test_legacy_formats_mixed_in_one_linear_write_their_own_columns() -> None:
    """A fused q/k/v as llama-quantize writes SmolLM2 at Q4_K_M (rows of 576 fall back): q, k in Q5_0, v in Q8_0;
    and gate/up of two legacy formats."""
    k = 96
    for kinds in ((T.Q5_0, T.Q5_0, T.Q8_0), (T.Q4_0, T.Q5_1)):
        parts = [(int(q), _raw(q, 8 + 4 * i, k, 20 + i)) for i, q in enumerate(kinds)]
        x = torch.randn(4, k)
        for round_x in (False, True):
            layer = GGUFLinear(parts, k, round_x=round_x)
            singles = [GGUFLinear([p], k, round_x=round_x)(x) for p in parts]
            assert torch.equal(layer(x), torch.cat(singles, dim=1))
