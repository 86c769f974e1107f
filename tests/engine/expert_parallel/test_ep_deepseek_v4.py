"""Expert parallelism on DeepSeek-V4: hash-routed layers (experts chosen by token id, on the rank that owns
the token, before dispatch) and score-routed layers with their shared expert. EP=2 and EP=4 ranks give the
single-process logits (fp32 tolerance) and greedy tokens; a placement change between steps changes nothing."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from ep_programs import ep_rank, ep_rank_rebalancing, reference
from recipe.engine.expert_parallel.process_group import run_ranks
from recipe.engine.layers.v4_moe import V4MoE
from recipe.engine.models.registry import load_model


def _prompts(seed: int, count: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 96) for _ in range(rng.randint(3, 12))] for _ in range(count)]


def _same(ranks: list[dict], want: dict, count: int) -> None:
    seen = []
    for got in ranks:
        for j, i in enumerate(got["prompts"]):
            torch.testing.assert_close(got["logits"][j], want["logits"][i], atol=2e-5, rtol=1e-5)
            assert got["tokens"][j] == want["tokens"][i]
            seen.append(i)
    assert sorted(seen) == list(range(count))


def test_checkpoint_has_both_router_kinds(v4_mixed: Path) -> None:
    model, _ = load_model(v4_mixed)
    kinds = [layer.mlp.gate.is_hash for layer in model.decoder_layers()]
    assert all(isinstance(layer.mlp, V4MoE) for layer in model.decoder_layers())
    assert True in kinds and False in kinds


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_v4_ep_equals_single_process(v4_mixed: Path, world: int) -> None:
    prompts = _prompts(world + 20, 5)
    want = reference(v4_mixed, prompts, 4)
    ranks = run_ranks(ep_rank, world, (v4_mixed, prompts, 4), timeout_s=240)
    _same(ranks, want, len(prompts))
    for r, got in enumerate(ranks):  # each rank loaded only its own contiguous shard of every layer
        per = 4 // world
        assert got["held"] and all(s == tuple(range(r * per, (r + 1) * per)) for s in got["held"].values())


def test_v4_more_experts_than_tokens_and_an_idle_rank(v4_16_experts: Path) -> None:
    """16 experts (top-4), 3 prompts on 4 ranks: a decode step has 1 token (4 rows) per busy rank, and rank 3
    has no prompt, so it only enters the collectives."""
    prompts = _prompts(31, 3)
    want = reference(v4_16_experts, prompts, 5)
    ranks = run_ranks(ep_rank, 4, (v4_16_experts, prompts, 5), timeout_s=240)
    assert ranks[3]["prompts"] == []
    _same(ranks, want, len(prompts))


def test_v4_placement_change_between_steps_changes_no_output(v4_16_experts: Path) -> None:
    prompts = _prompts(7, 3)
    steps, world, budget = 5, 2, 6
    want = reference(v4_16_experts, prompts, steps)
    ranks = run_ranks(ep_rank_rebalancing, world, (v4_16_experts, prompts, steps, 1, budget), timeout_s=240)
    _same(ranks, want, len(prompts))
    r0 = ranks[0]
    assert len(r0["plans"]) == 4  # every V4 layer is a MoE layer, hash-routed ones included
    for layer, plan in r0["plans"].items():
        assert plan.num_physical == 16 + budget and max(plan.replicas()) > 1
        assert all(r["plans"][layer] == plan for r in ranks)
    assert any(r["held_after"] != r["held_before"] for r in ranks)  # experts really moved between ranks
    assert r0["metrics_after"].replicas == {layer: plan.replicas() for layer, plan in r0["plans"].items()}
