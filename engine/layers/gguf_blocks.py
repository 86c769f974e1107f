"""GGUF's block formats as the file stores them (ggml-common.h): sizes, and exact torch dequantisers.

Rows of a weight [n, k] are whole blocks, so a row's bytes are `row_bytes(qtype, k)` and rows can be reordered
or concatenated as bytes. Each format's value per weight:
- Q8_0 (34 B / 32): f16 d, int8 q[32]; d * q.
- Q4_0 (18 B / 32): f16 d, nibbles (byte j: q[j] low, q[j + 16] high); d * (q - 8).
- Q4_1 (20 B / 32): f16 d, f16 m, nibbles as Q4_0; d * q + m.
- Q5_0 (22 B / 32): f16 d, 4 bytes qh (little-endian u32: bit j is bit 4 of q[j]), nibbles as Q4_0; d * (q - 16).
- Q5_1 (24 B / 32): f16 d, f16 m, qh and nibbles as Q5_0; d * q + m.
- Q4_K (144 B / 256): f16 d, f16 dmin, 12 bytes of 6-bit (sc, m) for 8 sub-blocks of 32, 128 bytes of nibbles
  (byte 32i + l: weight 64i + l low, 64i + 32 + l high); d * sc * q - dmin * m.
- Q5_K (176 B / 256): as Q4_K with 32 bytes qh (bit 2i of qh[l]: bit 4 of weight 64i + l; bit 2i + 1: of
  64i + 32 + l) between scales and nibbles.
- Q6_K (210 B / 256): ql[128], qh[64], int8 scales[16] (one per 16 weights), f16 d; per half h of 128 weights
  (ql + 64h, qh + 32h), weight l, l + 32, l + 64, l + 96 (l < 32) take ql[l] low, ql[l + 32] low, ql[l] high,
  ql[l + 32] high and bits 0-1, 2-3, 4-5, 6-7 of qh[l]; d * sc * (q - 32).
The dequantisers compute each value with the same fp32 operations as llama.cpp's (and gguf-py's), so they equal
`gguf.quants.dequantize` exactly (tests/engine/models/test_gguf_blocks.py).
"""

from __future__ import annotations

import torch

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = 2, 3, 6, 7, 8, 12, 13, 14  # ggml type ids
NAMES = {Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0", Q4_K: "Q4_K", Q5_K: "Q5_K",
         Q6_K: "Q6_K"}
# (weights per block, bytes per block)
SIZES = {Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34), Q4_K: (256, 144),
         Q5_K: (256, 176), Q6_K: (256, 210)}


def row_bytes(qtype: int, k: int) -> int:
    weights, nbytes = SIZES[qtype]
    assert k % weights == 0, f"{NAMES[qtype]} rows are whole blocks of {weights}, got {k}"
    return k // weights * nbytes


def _f16(b: torch.Tensor) -> torch.Tensor:
    """[..., 2] uint8 -> fp32 [...]."""
    return b.contiguous().view(torch.float16).squeeze(-1).to(torch.float32)


def _scale_min_k4(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """12 packed bytes [B, 12] -> (sc, m) [B, 8] as fp32 (llama.cpp's get_scale_min_k4)."""
    s = s.to(torch.int32)
    lo, mid, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat([lo & 63, (hi & 0xF) | ((lo >> 6) << 4)], dim=1)
    m = torch.cat([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], dim=1)
    return sc.to(torch.float32), m.to(torch.float32)


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[B, 128] -> q [B, 256] int32: byte 32i + l gives weight 64i + l (low) and 64i + 32 + l (high)."""
    g = qs.to(torch.int32).view(-1, 4, 1, 32)
    return torch.cat([g & 0xF, g >> 4], dim=2).view(-1, 256)


def _nibbles32(qs: torch.Tensor) -> torch.Tensor:
    """[B, 16] -> q [B, 32] int32: byte j gives weight j (low) and j + 16 (high)."""
    q = qs.to(torch.int32)
    return torch.cat([q & 0xF, q >> 4], dim=1)


def _high_bits(qh: torch.Tensor) -> torch.Tensor:
    """[B, 4] (a little-endian u32) -> bit 4 of each of the 32 weights, [B, 32] int32."""
    bits = qh.to(torch.int32).view(-1, 4, 1) >> torch.arange(8, dtype=torch.int32).view(1, 1, 8)
    return ((bits & 1) << 4).view(-1, 32)


def dequantize(raw: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    """raw uint8 [n, row_bytes] -> fp32 [n, k]."""
    n = raw.shape[0]
    weights, nbytes = SIZES[qtype]
    b = raw.reshape(n * (k // weights), nbytes)
    if qtype == Q8_0:
        out = _f16(b[:, None, 0:2]) * b[:, 2:].view(torch.int8).to(torch.float32)
    elif qtype == Q4_0:
        out = _f16(b[:, None, 0:2]) * (_nibbles32(b[:, 2:]) - 8).to(torch.float32)
    elif qtype == Q4_1:
        d, m = _f16(b[:, None, 0:2]), _f16(b[:, None, 2:4])
        out = d * _nibbles32(b[:, 4:]).to(torch.float32) + m
    elif qtype == Q5_0:
        q = _nibbles32(b[:, 6:]) | _high_bits(b[:, 2:6])
        out = _f16(b[:, None, 0:2]) * (q - 16).to(torch.float32)
    elif qtype == Q5_1:
        d, m = _f16(b[:, None, 0:2]), _f16(b[:, None, 2:4])
        out = d * (_nibbles32(b[:, 8:]) | _high_bits(b[:, 4:8])).to(torch.float32) + m
    elif qtype in (Q4_K, Q5_K):
        d, dmin = _f16(b[:, None, 0:2]), _f16(b[:, None, 2:4])
        sc, m = _scale_min_k4(b[:, 4:16])
        q = _nibbles(b[:, 16:144] if qtype == Q4_K else b[:, 48:176])
        if qtype == Q5_K:
            qh = b[:, 16:48].to(torch.int32).view(-1, 1, 1, 32)
            bit = torch.arange(8, dtype=torch.int32).view(1, 4, 2, 1)
            q = q + (((qh >> bit) & 1) << 4).view(-1, 256)
        scale, offset = (d * sc).repeat_interleave(32, dim=1), (dmin * m).repeat_interleave(32, dim=1)
        out = scale * q.to(torch.float32) - offset
    elif qtype == Q6_K:
        ql = b[:, 0:128].to(torch.int32).view(-1, 2, 1, 64)
        qh = b[:, 128:192].to(torch.int32).view(-1, 2, 1, 32)
        sc = b[:, 192:208].view(torch.int8).to(torch.float32)
        d = _f16(b[:, None, 208:210])
        low = torch.cat([ql & 0xF, ql >> 4], dim=2).view(-1, 2, 4, 32)  # weights l, l+32, l+64, l+96 (low 4 bits)
        shift = torch.tensor([0, 2, 4, 6], dtype=torch.int32).view(1, 1, 4, 1)
        high = ((qh >> shift) & 3) << 4  # [B, 2, 4, 32]
        q = ((low | high) - 32).view(-1, 256).to(torch.float32)
        out = (d * sc).repeat_interleave(16, dim=1) * q
    else:
        raise ValueError(f"GGUF type {qtype} has no dequantiser here; supported: {sorted(NAMES.values())}")
    return out.reshape(n, k)
