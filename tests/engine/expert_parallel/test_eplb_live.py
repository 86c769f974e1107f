"""EPLB while serving: loads recorded during the first steps, a new placement (hot experts replicated,
weights moved between ranks) applied between two decode steps, and every output unchanged."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from ep_programs import ep_rank_rebalancing, reference
from model_driver import DEEPSEEK_SMALL
from recipe.engine.expert_parallel.placement import default_placement
from recipe.engine.expert_parallel.process_group import run_ranks


def test_placement_change_between_steps_changes_no_output(v3_32_experts: Path) -> None:
    rng = random.Random(5)
    prompts = [[rng.randrange(2, 256) for _ in range(rng.randint(4, 14))] for _ in range(3)]
    steps, world, budget = 5, 2, 8
    want = reference(v3_32_experts, prompts, steps)
    ranks = run_ranks(ep_rank_rebalancing, world, (v3_32_experts, prompts, steps, 1, budget), timeout_s=240)
    for got in ranks:
        for j, i in enumerate(got["prompts"]):
            torch.testing.assert_close(got["logits"][j], want["logits"][i], atol=2e-5, rtol=1e-5)
            assert got["tokens"][j] == want["tokens"][i]
    r0 = ranks[0]
    experts = 32
    for layer, plan in r0["plans"].items():
        assert plan.num_physical == experts + budget and max(plan.replicas()) > 1
        assert all(r["plans"][layer] == plan for r in ranks)  # every rank planned the same placement
    assert any(r["held_after"] != r["held_before"] for r in ranks)  # experts really moved
    assert r0["held_before"][0] == default_placement(experts, world).slots[0]
    # metrics at the switch: the prefill and one decode step, k rows per token per MoE layer, over the ranks
    tokens = sum(len(p) + 1 for p in prompts)
    moe_layers = len(r0["plans"])
    assert moe_layers == 4 - DEEPSEEK_SMALL["first_k_dense_replace"]  # the 32-expert checkpoint has 4 layers
    m = r0["metrics_before"]
    assert sum(m.rank_tokens) == tokens * 4 * moe_layers
    assert int(r0["loads"].sum()) == tokens * 4 * moe_layers
    assert m.imbalance >= 1.0 and len(m.all_to_all_s) == world and m.all_to_all_calls == 4 * 2 * moe_layers
    after = r0["metrics_after"]
    assert after.replicas == {layer: plan.replicas() for layer, plan in r0["plans"].items()}
