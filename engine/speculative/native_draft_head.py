"""The Q8_0 draft head as one native call per chained position (`draft_head_step` in engine/kernels/llama_decode.c).

`quantized(head)` with `DraftProjection(..., q8_0=True)` computes the same products through torch modules, one call
per linear plus a dozen element-wise ops: SmolLM2's head spent ~1.3 ms a position that way, most of it around
~0.35 ms of products. Here the products are the same kernels on the same values (bit for bit); SiLU, the layer
norm and the softmax are computed in C, so the next hidden state agrees with the modules' to rounding and a
drafted token can differ only where two scores tie to rounding. Drafts never change outputs: the target verifies
each one.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
from recipe.engine.kernels.fused_llama import _Linear, _linear
from recipe.engine.kernels.native import library
from recipe.engine.layers.block_quant_linear import Q8_0Linear
from recipe.engine.speculative.draft_head import DraftHead, DraftProjection
from torch import nn

_I64, _F32, _PTR = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p


class _DraftHead(ctypes.Structure):
    _fields_ = [("hidden", _I64), ("inner", _I64), ("fuse", _Linear), ("up", _Linear), ("down", _Linear),
                ("lm", _Linear), ("ln_w", _PTR), ("ln_b", _PTR), ("eps", _F32), ("ids", _PTR)]


class NativeDraftHead:
    """Call it on (h [M, H], e [M, H]) fp32: (next hidden [M, H], probability [M], token ids [M])."""

    def __init__(self, desc: _DraftHead, keep: list[Any], lib: Any) -> None:
        self._desc, self._keep, self._lib, self.hidden = desc, keep, lib, int(desc.hidden)

    @classmethod
    def build(cls, head: DraftHead, project: DraftProjection) -> NativeDraftHead | None:
        """None where it does not apply: no native library, a linear of the head or the projection's vocabulary
        rows not Q8_0 (`quantized` keeps fp32 where a width is not a multiple of 32), or no reduced vocabulary."""
        lib = library()
        if lib is None or project.vocab is None or project.linear is None:
            return None
        linears: list[nn.Module] = [head.fuse, head.up, head.down, project.linear]
        if not all(isinstance(m, Q8_0Linear) for m in linears):
            return None
        norm = head.norm
        if not (isinstance(norm, nn.LayerNorm) and norm.weight is not None and norm.bias is not None):
            return None
        descs = [_linear(m) for m in linears]
        if any(d is None for d in descs):
            return None
        ln_w, ln_b = norm.weight.detach().float().contiguous(), norm.bias.detach().float().contiguous()
        ids = project.vocab.to(torch.int64).contiguous()
        fuse, up, down, lm = descs
        desc = _DraftHead(head.up.in_features, head.up.out_features, fuse, up, down, lm, ln_w.data_ptr(),
                          ln_b.data_ptr(), float(norm.eps), ids.data_ptr())
        return cls(desc, [linears, ln_w, ln_b, ids], lib)

    def __call__(self, h: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, e = h.float().contiguous(), e.float().contiguous()
        m = h.shape[0]
        out, p, tok = torch.empty(m, self.hidden), torch.empty(m), torch.empty(m, dtype=torch.int64)
        status = self._lib.draft_head_step(ctypes.addressof(self._desc), m, h.data_ptr(), e.data_ptr(), out.data_ptr(),
                                           p.data_ptr(), tok.data_ptr())
        if status != 0:
            raise MemoryError("draft head: the native kernel could not allocate its scratch memory")
        return out, p, tok
