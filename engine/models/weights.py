"""Copying checkpoint tensors (named as in `transformers`) into a model's parameters, with clear errors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: missing or misshapen tensors, unsupported config."""


def fetch(source: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    try:
        return source[name]
    except KeyError:
        raise CheckpointError(f"checkpoint has no tensor {name!r}") from None


def assign(param: torch.Tensor, value: torch.Tensor, name: str) -> None:
    """Put `value` into `param` (converting dtype); a shape mismatch names the tensor.

    A whole parameter takes the tensor itself when the dtype already matches (no copy); a view into a
    larger parameter (one expert of a stacked tensor) is copied into.
    """
    if tuple(param.shape) != tuple(value.shape):
        raise CheckpointError(f"tensor {name!r} has shape {tuple(value.shape)}, expected {tuple(param.shape)}")
    if isinstance(param, nn.Parameter) and param.dtype == value.dtype and value.is_contiguous():
        param.data = value
        return
    with torch.no_grad():
        param.copy_(value)


def assign_cat(param: torch.Tensor, source: Mapping[str, torch.Tensor], names: Iterable[str]) -> None:
    """Fill a fused parameter with the named tensors stacked along dim 0."""
    names = list(names)
    assign(param, torch.cat([fetch(source, n) for n in names], dim=0), " + ".join(names))


def check_all_used(source: Mapping[str, torch.Tensor], used: set[str], ignore_prefixes: tuple[str, ...] = ()) -> None:
    """Refuse a checkpoint holding weights the model would silently drop."""
    extra = sorted(k for k in source if k not in used and not k.startswith(ignore_prefixes))
    if extra:
        more = f" (and {len(extra) - 5} more)" if len(extra) > 5 else ""
        raise CheckpointError(f"checkpoint tensors not used by the model: {', '.join(extra[:5])}{more}")


def cast_floating(module: nn.Module, dtype: torch.dtype, keep_fp32: tuple[str, ...] = ()) -> None:
    """Cast floating parameters and buffers to `dtype`, except those whose name contains a `keep_fp32` part."""
    for name, p in module.named_parameters():
        if p.is_floating_point() and not any(k in name for k in keep_fp32):
            p.data = p.data.to(dtype)
    for name, b in module.named_buffers():
        if b.is_floating_point() and not any(k in name for k in keep_fp32) and "inv_freq" not in name:
            b.data = b.data.to(dtype)


class WeightLoader:
    """Copies named checkpoint tensors into parameters and remembers which were used, so that
    `finish` can refuse a checkpoint holding weights the model would drop."""

    def __init__(self, source: Mapping[str, torch.Tensor]) -> None:
        self.source = source
        self.used: set[str] = set()

    def one(self, param: torch.Tensor, name: str) -> None:
        assign(param, fetch(self.source, name), name)
        self.used.add(name)

    def cat(self, param: torch.Tensor, names: list[str]) -> None:
        """A fused parameter from the named tensors stacked along dim 0."""
        assign_cat(param, self.source, names)
        self.used.update(names)

    def finish(self, may_skip: set[str] | None = None, ignore_prefixes: tuple[str, ...] = ()) -> None:
        check_all_used(self.source, self.used | (may_skip or set()), ignore_prefixes)
