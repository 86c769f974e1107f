"""Linear layers whose weights are a GGUF file's own blocks (`EngineConfig.weight_format = "gguf"` or "gguf_q8"), so
the engine computes with exactly the file's quantisation (no fp32 copy, no re-quantising):

- `GGUFLinear`: rows in Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K as stored, possibly in several parts of
  different formats (a fused q/k/v whose v is Q6_K where q, k are Q4_K, as Q4_K_M files have), each part one native call
  (`gguf_matmul` in engine/kernels/gguf_kernels.c) writing its columns of the output.
- `FileQ8_0Linear`, `FileQ4_1Linear`: a weight wholly in Q8_0 or Q4_1 becomes the existing block layer
  (`block_quant_linear.py`) holding the file's q and scales, which the fused decode step also reads.

Activations: `round_x=False` ("gguf") keeps them fp32, so the layer computes `x @ dequantized().T`, the product with
exactly the file's dequantised weights (summation order aside); `round_x=True` ("gguf_q8") rounds them to Q8_0
blocks of 32 as llama.cpp and the q8_0/q4_1 layers do (`round_activations`): integer block products, cheaper in
batches, `round_activations(x) @ dequantized().T`. Either way each row is computed alone, whatever the batch.
Without the native library it is that torch expression. Another activation dtype runs through fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.kernels.native import library
from recipe.engine.layers.block_quant_linear import Q4_1Linear, Q8_0Linear, round_activations
from recipe.engine.layers.gguf_blocks import NAMES, Q4_1, Q8_0, SIZES, dequantize, row_bytes
from torch import nn

Part = tuple[int, torch.Tensor]  # (ggml type id, raw rows uint8 [n, row_bytes])


class GGUFLinear(nn.Module):
    """y = x @ W^T (+ bias), W = the row-wise concatenation of `parts`, each rows of GGUF blocks."""

    def __init__(self, parts: list[Part], in_features: int, bias: torch.Tensor | None = None,
                 round_x: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.round_x = round_x
        if len(parts) > 1 and len({q for q, _ in parts}) == 1:  # one format: one part (the fused step reads it)
            parts = [(parts[0][0], torch.cat([r for _, r in parts]))]
        self.qtypes: list[int] = []
        self.rows: list[int] = []
        for i, (qtype, raw) in enumerate(parts):
            assert qtype in SIZES, f"GGUF type {qtype} is not one of {sorted(NAMES.values())}"
            assert raw.dtype == torch.uint8 and raw.dim() == 2 and raw.shape[1] == row_bytes(qtype, in_features)
            self.register_buffer(f"raw{i}", raw.contiguous())
            self.qtypes.append(qtype)
            self.rows.append(raw.shape[0])
        self.out_features = sum(self.rows)
        self.bias = bias

    def raw_parts(self) -> list[Part]:
        return [(q, getattr(self, f"raw{i}")) for i, q in enumerate(self.qtypes)]

    def dequantized(self) -> torch.Tensor:
        return torch.cat([dequantize(raw, q, self.in_features) for q, raw in self.raw_parts()])

    @property
    def weight(self) -> torch.Tensor:
        """W dequantised (a new fp32 [out, in] tensor each call): for the rare caller that needs the matrix (a
        speculative draft head's LM head); the forward never builds it."""
        return self.dequantized()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(torch.float32).contiguous()
        lib = library()
        if lib is None:
            y = F.linear(round_activations(flat) if self.round_x else flat, self.dequantized())
        else:
            y = flat.new_empty(flat.shape[0], self.out_features)
            col = 0
            for q, raw in self.raw_parts():
                lib.gguf_matmul(flat.data_ptr(), flat.shape[0], self.in_features, raw.data_ptr(), q, raw.shape[0],
                                y.data_ptr() + 4 * col, self.out_features, int(self.round_x))
                col += raw.shape[0]
        if self.bias is not None:
            y = y + self.bias.to(torch.float32)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        kinds = "+".join(f"{NAMES[q]}[{n}]" for q, n in zip(self.qtypes, self.rows, strict=True))
        return (f"in_features={self.in_features}, out_features={self.out_features}, blocks={kinds}, "
                f"activations={'q8_0' if self.round_x else 'fp32'}")


def _blocks(raw: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    weights, nbytes = SIZES[qtype]
    return raw.reshape(raw.shape[0], k // weights, nbytes)


def _f16(b: torch.Tensor) -> torch.Tensor:
    return b.contiguous().view(torch.float16).squeeze(-1).to(torch.float32).contiguous()


class FileQ8_0Linear(Q8_0Linear):
    """A Q8_0Linear holding a GGUF Q8_0 weight's own q and d (d widened from f16 to fp32, exactly)."""

    def __init__(self, raw: torch.Tensor, in_features: int, bias: torch.Tensor | None = None) -> None:
        nn.Module.__init__(self)
        b = _blocks(raw, Q8_0, in_features)
        self.out_features, self.in_features = raw.shape[0], in_features
        self.register_buffer("qweight", b[:, :, 2:].contiguous().view(torch.int8).reshape(raw.shape[0], in_features))
        self.register_buffer("d", _f16(b[:, :, 0:2]))
        self.bias = bias


class FileQ4_1Linear(Q4_1Linear):
    """A Q4_1Linear holding a GGUF Q4_1 weight's own nibbles, d and m (the same packing)."""

    def __init__(self, raw: torch.Tensor, in_features: int, bias: torch.Tensor | None = None) -> None:
        nn.Module.__init__(self)
        b = _blocks(raw, Q4_1, in_features)
        self.out_features, self.in_features = raw.shape[0], in_features
        self.register_buffer("packed", b[:, :, 4:].contiguous().reshape(raw.shape[0], in_features // 2))
        self.register_buffer("d", _f16(b[:, :, 0:2]))
        self.register_buffer("m", _f16(b[:, :, 2:4]))
        self.bias = bias


def repacks(kinds: set[int], round_x: bool) -> bool:
    """Whether `file_linear` copies a weight of these formats into another layout (so its blocks need not stay)."""
    return round_x and kinds in ({Q8_0}, {Q4_1})


def file_linear(parts: list[Part], in_features: int, bias: torch.Tensor | None = None,
                round_x: bool = False) -> nn.Module:
    """The layer for a weight made of `parts`: with `round_x`, one Q8_0 or Q4_1 format throughout -> the fused
    step's layer (which rounds activations so); anything else -> `GGUFLinear`."""
    kinds = {q for q, _ in parts}
    if repacks(kinds, round_x):
        raw = torch.cat([r for _, r in parts]) if len(parts) > 1 else parts[0][1]
        return (FileQ8_0Linear if kinds == {Q8_0} else FileQ4_1Linear)(raw, in_features, bias)
    return GGUFLinear(parts, in_features, bias, round_x)
