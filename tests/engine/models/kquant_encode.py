"""Simple encoders of fp32 rows into GGUF blocks, for writing test checkpoints (gguf-py quantises only Q8_0 and
the legacy formats). Not llama.cpp's quantisers (no error search), but valid blocks of each layout: the tests
read them back with gguf-py's own `dequantize` as the oracle.

Layouts (ggml-common.h), per super-block of 256 weights:
- Q4_K, 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) for 8 sub-blocks of 32, 128 bytes of
  nibbles (byte 32i + l: low = weight 64i + l, high = weight 64i + 32 + l); w = d * sc * q - dmin * m.
- Q5_K, 176 bytes: as Q4_K plus 32 bytes qh (bit 2i of qh[l]: the fifth bit of weight 64i + l, bit 2i + 1 of
  weight 64i + 32 + l) before the nibbles; q in 0..31.
- Q6_K, 210 bytes: 128 bytes ql, 64 bytes qh, 16 int8 scales (one per 16 weights), f16 d; q in -32..31.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

QK_K = 256


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).view(np.uint8).reshape(*x.shape, 2)


def _pack_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """sc, mn [B, 8] in 0..63 -> the 12-byte packing `get_scale_min_k4` reads."""
    out = np.zeros((sc.shape[0], 12), np.uint8)
    for j in range(4):
        out[:, j] = sc[:, j] | ((sc[:, j + 4] >> 4) << 6)
        out[:, j + 4] = mn[:, j] | ((mn[:, j + 4] >> 4) << 6)
        out[:, j + 8] = (sc[:, j + 4] & 0xF) | ((mn[:, j + 4] & 0xF) << 4)
    return out


def _scale_min_k(blocks: np.ndarray, levels: int) -> tuple[np.ndarray, ...]:
    """blocks [B, 256] -> (d, dmin as f16-rounded fp32 [B], sc, mn [B, 8] uint8, q [B, 256] uint8)."""
    sub = blocks.reshape(-1, 8, 32)
    lo = np.minimum(sub.min(-1), 0.0)
    scale = (sub.max(-1) - lo) / levels
    d = (scale.max(-1) / 63.0).astype(np.float16).astype(np.float32)
    dmin = ((-lo).max(-1) / 63.0).astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(scale / np.where(d > 0, d, 1)[:, None]), 0, 63).astype(np.uint8)
    mn = np.clip(np.round(-lo / np.where(dmin > 0, dmin, 1)[:, None]), 0, 63).astype(np.uint8)
    step = d[:, None] * sc
    q = np.round((sub + (dmin[:, None] * mn)[..., None]) / np.where(step > 0, step, 1)[..., None])
    q = np.clip(q, 0, levels).astype(np.uint8).reshape(-1, QK_K)
    return d, dmin, sc, mn, q


def _nibbles(q: np.ndarray) -> np.ndarray:
    """q [B, 256] low 4 bits -> 128 bytes (byte 32i + l: weight 64i + l low, 64i + 32 + l high)."""
    g = (q & 0xF).reshape(-1, 4, 2, 32)
    return (g[:, :, 0] | (g[:, :, 1] << 4)).reshape(-1, 128).astype(np.uint8)


def q4_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, sc, mn, q = _scale_min_k(blocks, 15)
    return np.concatenate([_f16(d), _f16(dmin), _pack_scales(sc, mn), _nibbles(q)], axis=1)


def q5_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, sc, mn, q = _scale_min_k(blocks, 31)
    hi = (q >> 4).reshape(-1, 4, 2, 32).astype(np.uint8)
    qh = np.zeros((q.shape[0], 32), np.uint8)
    for i in range(4):
        qh |= (hi[:, i, 0] << (2 * i)) | (hi[:, i, 1] << (2 * i + 1))
    return np.concatenate([_f16(d), _f16(dmin), _pack_scales(sc, mn), qh, _nibbles(q)], axis=1)


def q6_k(blocks: np.ndarray) -> np.ndarray:
    sub = blocks.reshape(-1, 16, 16)
    amax = np.abs(sub).max(-1)
    scale = amax / 31.0
    d = (scale.max(-1) / 127.0).astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(scale / np.where(d > 0, d, 1)[:, None]), 1, 127).astype(np.int8)
    step = d[:, None] * sc
    q = np.clip(np.round(sub / np.where(step > 0, step, 1)[..., None]), -32, 31).astype(np.int16)
    u = (q + 32).astype(np.uint8).reshape(-1, 2, 128)
    ql = np.zeros((u.shape[0], 2, 64), np.uint8)
    qh = np.zeros((u.shape[0], 2, 32), np.uint8)
    ql[:, :, :32] = (u[:, :, 0:32] & 0xF) | ((u[:, :, 64:96] & 0xF) << 4)
    ql[:, :, 32:] = (u[:, :, 32:64] & 0xF) | ((u[:, :, 96:128] & 0xF) << 4)
    qh[:] = ((u[:, :, 0:32] >> 4) | ((u[:, :, 32:64] >> 4) << 2) | ((u[:, :, 64:96] >> 4) << 4)
             | ((u[:, :, 96:128] >> 4) << 6))
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8), _f16(d)], axis=1)


_ENCODERS = {GGMLQuantizationType.Q4_K: q4_k, GGMLQuantizationType.Q5_K: q5_k, GGMLQuantizationType.Q6_K: q6_k}


def encode(weight: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """weight [n, k] fp32 -> GGUF bytes [n, row bytes] of `qtype` (K-quants here; others through gguf-py)."""
    if qtype not in _ENCODERS:
        from gguf.quants import quantize

        return quantize(np.ascontiguousarray(weight, dtype=np.float32), qtype)
    n, k = weight.shape
    assert k % QK_K == 0, f"{qtype.name} needs rows of a multiple of {QK_K}, got {k}"
    blocks = np.ascontiguousarray(weight, dtype=np.float32).reshape(-1, QK_K)
    return _ENCODERS[qtype](blocks).reshape(n, -1)
