"""fp32 linears of a few rows, computed weight-major: y^T = W @ x^T (`EngineConfig.linear_backend`).

Scoring a handful of rows (a speculative verify step of k+1 positions, a small decode batch) through
`F.linear`'s x @ W^T takes MKL's small-M GEMM path, measured on this CPU (fp32, one thread, CPU time) at
1.6-2.2x the cost of one row for 2-3 rows (SmolLM2's layer linears 43.8 / 59.8 ms per 30 layers against
26.8 ms for one row; its 49152-row LM head 15.5 / 24.0 ms against 7.4). The same product taken with the
weight as the left operand reads W once for all rows: 20.2 / 27.6 ms and 5.2 / 6.5 ms. Past 3 rows it
only wins where the weight has at least as many outputs as inputs (5 rows: 19.3 against 30.1 ms for the
3072x576 gate/up, 17.9 against 11.5 ms for the 576x1536 down projection), and past 6 rows nowhere, so fp32
CPU products of 2..3 rows, or up to 6 rows of a weight with out >= in, take that path; everything else is
`F.linear`. Values equal `F.linear`'s up to summation order (neither is bitwise equal to one row at a time).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 6  # weights with out >= in
MAX_ROWS_WIDE_INPUT = 3  # weights with out < in


def few_rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, weight-major for a few fp32 CPU rows (see the module's docstring)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    limit = MAX_ROWS if weight.shape[0] >= weight.shape[1] else MAX_ROWS_WIDE_INPUT
    if not (2 <= rows <= limit and x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu"):
        return F.linear(x, weight, bias)
    y = torch.mm(weight, x.reshape(rows, x.shape[-1]).t()).t().contiguous()
    if bias is not None:
        y += bias
    return y.view(*x.shape[:-1], weight.shape[0])


class FewRowsLinear(nn.Linear):
    """`nn.Linear` whose forward is `few_rows_linear` (same parameters; made by `use_few_rows_linears`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return few_rows_linear(x, self.weight, self.bias)


def use_few_rows_linears(model: nn.Module) -> int:
    """Give every plain `nn.Linear` of `model` the weight-major forward, in place; returns how many.

    Quantised linears (`weight_format` other than "dtype") are other classes and keep their own kernels."""
    n = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = FewRowsLinear
            n += 1
    return n
