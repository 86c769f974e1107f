"""`as_dtype`: a tensor in a dtype, without a call into torch when it already is (`Tensor.to` costs a few
microseconds even when it returns its input; the V4 decode step makes about a hundred such calls)."""

from __future__ import annotations

import torch


def as_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x.to(dtype)`: the same tensor when it already has `dtype`."""
    return x if x.dtype == dtype else x.to(dtype)
