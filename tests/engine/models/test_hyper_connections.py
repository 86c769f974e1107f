"""Hyper-connections: the inference path (cached column tables, in-place Sinkhorn, the gates' one addcmul)
equals the formula bit for bit, and follows new weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.layers.hyper_connections import HyperConnection, sinkhorn, unweighted_rms_norm


def _formula(hc: HyperConnection, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n, m = streams.shape[0], hc.hc
    mix = F.linear(unweighted_rms_norm(streams.reshape(n, -1), hc.norm_eps), hc.fn)
    scale = torch.cat([hc.scale[0].expand(m), hc.scale[1].expand(m), hc.scale[2].expand(m * m)])
    z = torch.addcmul(hc.base, mix, scale)  # as before the cached tables
    pre = torch.sigmoid(z[:, :m]) + hc.hc_eps
    post = torch.sigmoid(z[:, m : 2 * m]) * 2
    comb = torch.softmax(z[:, 2 * m :].view(n, m, m), dim=-1) + hc.hc_eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc.hc_eps)
    for _ in range(hc.iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc.hc_eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc.hc_eps)
    return post, comb, (pre.unsqueeze(-1) * streams).sum(dim=1)


def _randomise(hc: HyperConnection, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hc.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


def test_forward_equals_formula_and_follows_new_scale() -> None:
    hc = HyperConnection(hidden_size=8, hc_mult=4, sinkhorn_iters=5, hc_eps=1e-6, norm_eps=1e-6)
    streams = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    for seed in (0, 1):  # the second set of weights must replace the cached column scales
        _randomise(hc, seed)
        with torch.inference_mode():
            got = hc(streams)
        with torch.no_grad():
            want = _formula(hc, streams)
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w)


def test_sinkhorn_in_place_equals_autograd_form() -> None:
    logits = torch.randn(5, 3, 3, generator=torch.Generator().manual_seed(2))
    probs = torch.softmax(logits, dim=-1)
    with_grad = sinkhorn(probs.clone().requires_grad_(True), 4, 1e-6)
    in_place = sinkhorn(probs.clone(), 4, 1e-6)
    assert torch.equal(with_grad.detach(), in_place)
    assert torch.allclose(in_place.sum(dim=-2), torch.ones(5, 3), atol=1e-5)  # columns sum to one
