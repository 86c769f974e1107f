"""Manifold-constrained hyper-connections (DeepSeek-V4): `hc_mult` residual streams per token instead of one.

Before a block, a one-layer perceptron over the (unweighted-RMS-normalised) concatenated streams yields
`pre` (collapse weights), `post` (expand weights) and `comb` (stream mixing, projected towards a doubly
stochastic matrix by Sinkhorn-Knopp); the block reads the `pre`-collapsed streams and its output returns as
`post * out + comb^T @ streams`. `HyperHead` collapses the streams once more before the final norm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.layers.cast import as_dtype
from torch import nn


def unweighted_rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """`x * rsqrt(mean(x^2) + eps)` over the last dimension (in fp32 through torch's fused kernel, which equals
    the formula bit for bit, one call for six)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), eps=eps)
    return x * as_dtype(torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps), x.dtype)


def sinkhorn(probs: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """Row-softmaxed `probs` [N, hc, hc] + eps towards doubly stochastic: a column normalisation, then `iters - 1`
    (row, column) rounds, each `x / (sum + eps)`. In place on `probs` outside autograd (the same fp32 operations
    without a new tensor per op)."""
    if probs.requires_grad:
        comb = probs + eps
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
        for _ in range(iters - 1):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
        return comb
    comb = probs.add_(eps)
    comb.div_(comb.sum(dim=-2, keepdim=True).add_(eps))
    for _ in range(iters - 1):
        comb.div_(comb.sum(dim=-1, keepdim=True).add_(eps))
        comb.div_(comb.sum(dim=-2, keepdim=True).add_(eps))
    return comb


class HyperConnection(nn.Module):
    """Streams [N, hc, D] -> (post [N, hc], comb [N, hc, hc], collapsed [N, D])."""

    def __init__(self, hidden_size: int, hc_mult: int, sinkhorn_iters: int, hc_eps: float, norm_eps: float) -> None:
        super().__init__()
        self.hc, self.iters, self.hc_eps, self.norm_eps = hc_mult, sinkhorn_iters, hc_eps, norm_eps
        width = (2 + hc_mult) * hc_mult
        self.fn = nn.Parameter(torch.empty(width, hc_mult * hidden_size, dtype=torch.float32))
        self.base = nn.Parameter(torch.empty(width, dtype=torch.float32))
        self.scale = nn.Parameter(torch.empty(3, dtype=torch.float32))
        self._columns: tuple[tuple[int, int, torch.device], torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def columns(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(scale of each column of the mix: `scale[0]` for pre's, `scale[1]` for post's, `scale[2]` for comb's;
        the gates' factor and offset: pre = sigmoid + hc_eps, post = 2 sigmoid), fp32. Made on first use (the
        model may be built on the meta device and materialised later) and again whenever `scale` changes; as
        normal tensors even under inference mode, so that a later autograd call may use them."""
        key = (self.scale.data_ptr(), self.scale._version, device)
        cached = self._columns
        if cached is None or cached[0] != key:
            hc = self.hc
            with torch.inference_mode(False):
                index = torch.tensor([0] * hc + [1] * hc + [2] * hc * hc, device=device)
                scale = as_dtype(self.scale.detach(), torch.float32).to(device)[index]
                factor = torch.tensor([1.0] * hc + [2.0] * hc, device=device)
                offset = torch.tensor([self.hc_eps] * hc + [0.0] * hc, dtype=torch.float32, device=device)
            cached = self._columns = (key, scale, factor, offset)
        return cached[1], cached[2], cached[3]

    def forward(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, hc = streams.shape[0], self.hc
        flat = unweighted_rms_norm(as_dtype(streams.reshape(n, -1), torch.float32), self.norm_eps)
        mix = F.linear(flat, as_dtype(self.fn, torch.float32))
        scale, factor, offset = self.columns(streams.device)
        # mix * scale + base for the three parts at once, then pre and post through one sigmoid and one addcmul
        # (x * 1 + eps and 0 + x * 2: the same bits as x + eps and x * 2)
        z = torch.addcmul(as_dtype(self.base, torch.float32), mix, scale)
        gates = torch.addcmul(offset, torch.sigmoid(z[:, : 2 * hc]), factor)
        pre, post = gates[:, :hc], gates[:, hc:]
        comb = sinkhorn(torch.softmax(z[:, 2 * hc :].view(n, hc, hc), dim=-1), self.iters, self.hc_eps)
        collapsed = as_dtype((pre.unsqueeze(-1) * streams).sum(dim=1), streams.dtype)
        return post, comb, collapsed


def expand(streams: torch.Tensor, out: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """The block output `out` [N, D] returned into the streams [N, hc, D]: post * out + comb^T @ streams."""
    dtype = streams.dtype
    return as_dtype(post, dtype).unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(as_dtype(comb, dtype).transpose(-1, -2),
                                                                                 streams)


class HyperHead(nn.Module):
    """The final collapse of the streams [N, hc, D] -> [N, D]."""

    def __init__(self, hidden_size: int, hc_mult: int, hc_eps: float, norm_eps: float) -> None:
        super().__init__()
        self.hc_eps, self.norm_eps = hc_eps, norm_eps
        self.hc_fn = nn.Parameter(torch.empty(hc_mult, hc_mult * hidden_size, dtype=torch.float32))
        self.hc_base = nn.Parameter(torch.empty(hc_mult, dtype=torch.float32))
        self.hc_scale = nn.Parameter(torch.empty(1, dtype=torch.float32))

    def forward(self, streams: torch.Tensor) -> torch.Tensor:
        flat = unweighted_rms_norm(as_dtype(streams.flatten(1), torch.float32), self.norm_eps)
        mix = F.linear(flat, as_dtype(self.hc_fn, torch.float32))
        pre = torch.sigmoid(torch.addcmul(as_dtype(self.hc_base, torch.float32), mix,
                                          as_dtype(self.hc_scale, torch.float32))) + self.hc_eps
        return as_dtype((pre.unsqueeze(-1) * streams).sum(dim=1), streams.dtype)
