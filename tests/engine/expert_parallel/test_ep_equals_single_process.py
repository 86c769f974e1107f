"""Expert parallelism changes no output: EP=2 and EP=4 ranks (gloo, one process each, experts sharded,
attention data-parallel) produce the single-process logits (fp32 tolerance) and greedy tokens."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from ep_programs import ep_rank, reference
from recipe.engine.expert_parallel.process_group import run_ranks


def _prompts(seed: int, count: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 256) for _ in range(rng.randint(3, 12))] for _ in range(count)]


def _check(path: Path, world: int, prompts: list[list[int]], decode_steps: int) -> None:
    want = reference(path, prompts, decode_steps)
    ranks = run_ranks(ep_rank, world, (path, prompts, decode_steps), timeout_s=240)
    seen = []
    for r, got in enumerate(ranks):
        for j, i in enumerate(got["prompts"]):
            torch.testing.assert_close(got["logits"][j], want["logits"][i], atol=2e-5, rtol=1e-5)
            assert got["tokens"][j] == want["tokens"][i]
            seen.append(i)
        for layer, slots in got["held"].items():  # each rank loaded only its own contiguous shard
            per = len(slots)
            assert [e for e in slots if e >= 0] == [e for e in range(r * per, (r + 1) * per)
                                                     if e < len(ranks) * per and e >= 0][:per], (layer, slots)
    assert sorted(seen) == list(range(len(prompts)))


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_ep_equals_single_process(v3_8_experts: Path, world: int) -> None:
    _check(v3_8_experts, world, _prompts(world, 5), decode_steps=4)


def test_more_experts_than_tokens_and_an_idle_rank(v3_32_experts: Path) -> None:
    """32 experts, 3 prompts on 4 ranks: decode steps carry 1 token per busy rank (4 expert rows), and rank 3
    has no prompt at all, so it only enters the collectives."""
    _check(v3_32_experts, 4, _prompts(9, 3), decode_steps=5)
