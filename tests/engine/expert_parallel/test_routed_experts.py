"""The shared routed-experts path: both backends equal a per-token sum over the chosen experts, with either
activation (V3's SwiGLU, V4's clamped SwiGLU)."""

from __future__ import annotations

from functools import partial

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.layers.routed_experts import RoutedExperts, silu_and_mul
from recipe.engine.layers.v4_moe import V4MoE, V4Router, clamped_swiglu


def _by_token(m: RoutedExperts, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The oracle: for each token, sum weight * down(act(gate x, up x)) over its chosen experts."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gate, up = (m.w_gate_up[e] @ x[t]).split(m.inter)
            out[t] += weights[t, j] * (m.w_down[e] @ m.activation(gate, up))
    return out


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), tokens=st.integers(0, 20), experts=st.integers(1, 12), top_k=st.integers(1, 4),
       clamped=st.booleans(), backend=st.sampled_from(["grouped", "loop"]))
def test_backends_equal_the_per_token_sum(seed: int, tokens: int, experts: int, top_k: int, clamped: bool,
                                          backend: str) -> None:
    g = torch.Generator().manual_seed(seed)
    act = partial(clamped_swiglu, limit=0.5) if clamped else silu_and_mul
    m = RoutedExperts(8, 4, experts, act).double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    m.backend = backend
    x = torch.randn(tokens, 8, generator=g, dtype=torch.float64)
    ids = torch.randint(0, experts, (tokens, top_k), generator=g)
    weights = torch.rand(tokens, top_k, generator=g, dtype=torch.float64)
    with torch.inference_mode():
        torch.testing.assert_close(m.routed(x, weights, ids), _by_token(m, x, weights, ids), atol=1e-10, rtol=0)


def test_v4_moe_runs_the_shared_grouped_path_with_its_clamp() -> None:
    g = torch.Generator().manual_seed(3)
    router = V4Router(8, 6, 2, "sqrtsoftplus", 1.5, vocab_size=None)
    moe = V4MoE(8, 4, 6, router, swiglu_limit=0.3).double()
    with torch.no_grad():
        for p in moe.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    x = torch.randn(9, 8, generator=g, dtype=torch.float64)
    tokens = torch.zeros(9, dtype=torch.int64)
    with torch.inference_mode():
        weights, ids = router(x, tokens)
        gate, up = moe.shared_gate_up(x).split(4, dim=-1)
        want = _by_token(moe, x, weights, ids) + moe.shared_down(clamped_swiglu(gate, up, 0.3))
        moe.backend = "grouped"
        grouped = moe(x, tokens)
        moe.backend = "loop"
        loop = moe(x, tokens)
    torch.testing.assert_close(grouped, want, atol=1e-10, rtol=0)
    torch.testing.assert_close(loop, want, atol=1e-10, rtol=0)
