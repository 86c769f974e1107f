"""Weight-only quantised linear layers on torch's CPU kernels, and the pass that swaps them into a model.

- `Int8Linear`: symmetric int8 per output channel (`aten._weight_int8pack_mm`).
- `Int4Linear`: asymmetric int4 in groups of 32 input features (`aten._weight_int4pack_mm_for_cpu`), value =
  (q - 8) * scale + zero. A GGUF Q4_1 weight (blocks of 32, value = d * q + m, q in 0..15) is re-expressed
  here exactly up to rounding: the group's min/max quantisation recovers d and m whenever the block uses
  q = 0 and q = 15, which Q4_1's own min/max quantiser guarantees.
Activations stay in the model dtype; bias, if any, is added in that dtype.
"""

from __future__ import annotations

import torch
from torch import nn

GROUP = 32


def int4_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q int32 [n, k] in 0..15, scale [n, k/32], zero [n, k/32]) with value = (q - 8) * scale + zero."""
    n, k = weight.shape
    w = weight.to(torch.float32).view(n, k // GROUP, GROUP)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    scale = ((hi - lo) / 15.0).clamp(min=1e-12)
    q = torch.round((w - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(n, k)
    return q, scale, lo + 8.0 * scale


def int4_dequantize(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    n, k = q.shape
    g = q.view(n, k // GROUP, GROUP).to(torch.float32)
    return ((g - 8.0) * scale[..., None] + zero[..., None]).view(n, k)


class Int8Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        w = weight.detach().to(torch.float32)
        self.out_features, self.in_features = w.shape
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        self.qweight: torch.Tensor
        self.scale: torch.Tensor
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(weight.dtype))
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.scale.to(x.dtype))
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)

    def dequantized(self) -> torch.Tensor:
        return self.qweight.to(torch.float32) * self.scale.to(torch.float32)[:, None]


class Int4Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        n, k = weight.shape
        assert k % GROUP == 0 and n % 16 == 0, f"int4 needs in % {GROUP} == 0 and out % 16 == 0, got {n}x{k}"
        self.in_features, self.out_features = k, n
        q, scale, zero = int4_quantize(weight.detach())
        self.packed: torch.Tensor
        self.scales_zeros: torch.Tensor
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))
        self.register_buffer("scales_zeros", torch.stack((scale, zero), dim=-1).transpose(0, 1).contiguous())
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_zeros.to(x.dtype))
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)

def quantized_linear(weight_format: str, weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Module:
    """One weight in `weight_format`: "int8" / "int4" on torch's kernels (int4 falls back to int8 for shapes its
    kernel cannot take), "q8_0" / "q4_1" in GGUF's block layouts on the native kernels (block_quant_linear.py)."""
    from recipe.engine.layers.block_quant_linear import Q4_1Linear, Q8_0Linear

    n, k = weight.shape
    if weight_format in ("q8_0", "q4_1"):
        assert k % GROUP == 0, f"{weight_format} needs in_features % {GROUP} == 0, got {k}"
        return (Q8_0Linear if weight_format == "q8_0" else Q4_1Linear)(weight, bias)
    fits4 = k % GROUP == 0 and n % 16 == 0
    return (Int4Linear if weight_format == "int4" and fits4 else Int8Linear)(weight, bias)


def quantize_linears(model: nn.Module, weight_format: str, skip: tuple[str, ...] = ("kv_b_proj",)) -> int:
    """Replace the model's `nn.Linear` layers by quantised ones (`quantized_linear`; "dtype" leaves them).
    Block formats (q8_0, q4_1) leave a layer whose input width is not a multiple of 32 as it is. Modules whose
    name ends in `skip` (weights read directly, like MLA's absorbed `kv_b_proj`) are left as they are.
    Returns the count."""
    if weight_format == "dtype":
        return 0
    assert weight_format in ("int8", "int4", "q8_0", "q4_1"), weight_format
    swapped = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if not isinstance(child, nn.Linear) or full.endswith(skip):
                continue
            if weight_format in ("q8_0", "q4_1") and child.in_features % GROUP:
                continue
            setattr(module, child_name, quantized_linear(weight_format, child.weight, child.bias))
            swapped += 1
    return swapped
