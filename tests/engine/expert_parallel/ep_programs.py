"""What the expert-parallel tests run: the single-process reference and the per-rank program (data-parallel
attention: rank r serves prompts r, r + N, ...; experts sharded), on tiny DeepSeek-V3 and DeepSeek-V4
checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from model_driver import PagedDriver
from recipe.engine.expert_parallel import metrics
from recipe.engine.expert_parallel.ep_moe import enter_collectives_without_tokens
from recipe.engine.expert_parallel.load_recorder import ExpertLoadRecorder
from recipe.engine.expert_parallel.placement_apply import rebalance
from recipe.engine.expert_parallel.sharded_weights import CheckpointExperts, shard_for_rank
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from recipe.engine.models.registry import load_model
from recipe.engine.models.safetensors_loader import SafetensorsCheckpoint
from v4_checkpoints import V4Driver


class _LastLogits:
    """Steps a model over sequences and returns each sequence's last-token fp32 logits: DeepSeek-V3 through
    `PagedDriver` (attention context), DeepSeek-V4 through `V4Driver` (multi-kind paged cache)."""

    def __init__(self, model: torch.nn.Module, num_seqs: int, max_len: int) -> None:
        self.v4 = isinstance(model, DeepseekV4ForCausalLM)
        if self.v4:
            model.allocate_kv_cache(24 * num_seqs, 4, torch.float32, "cpu")  # type: ignore[operator]
            self.driver: Any = V4Driver(model)  # type: ignore[arg-type]
        else:
            self.driver = PagedDriver(model, num_seqs=num_seqs, max_len=max_len, attention_backend="reference")
        self.lens = [0] * num_seqs

    def step(self, batch: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        if self.v4:
            out = self.driver.step([(i, self.lens[i], toks) for i, toks in batch])
            last = [o[-1] for o in out]
        else:
            flat = self.driver.step(batch)
            ends = torch.tensor([len(toks) for _, toks in batch]).cumsum(0) - 1
            last = list(flat[ends])
        for i, toks in batch:
            self.lens[i] += len(toks)
        return last


def greedy_run(model: torch.nn.Module, prompts: list[list[int]], decode_steps: int,
               between: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Prefill every prompt in one step, then `decode_steps` greedy decode steps of all of them together.
    Returns the fp32 logits of each step's last token per prompt ([steps + 1, V] each) and the tokens.
    `between(step)` runs after each step but the last (a safe point)."""
    driver = _LastLogits(model, len(prompts), max(map(len, prompts)) + decode_steps + 1)
    logits: list[list[torch.Tensor]] = [[] for _ in prompts]
    tokens: list[list[int]] = [[] for _ in prompts]
    last = driver.step(list(enumerate(prompts)))
    for step in range(decode_steps + 1):
        for i in range(len(prompts)):
            logits[i].append(last[i])
            tokens[i].append(int(last[i].argmax()))
        if step < decode_steps:
            if between is not None:
                between(step)
            last = driver.step([(i, [tokens[i][-1]]) for i in range(len(prompts))])
    return {"logits": [torch.stack(x) for x in logits], "tokens": tokens}


def reference(path: Path, prompts: list[list[int]], decode_steps: int) -> dict[str, Any]:
    model, _ = load_model(path)
    return greedy_run(model, prompts, decode_steps)


def ep_rank(rank: int, world_size: int, path: Path, prompts: list[list[int]], decode_steps: int) -> dict[str, Any]:
    """Rank `rank`'s share of `reference`, with its experts sharded; a rank without prompts still enters
    every MoE layer's collectives at every step. Also reports which experts it loaded."""
    model, _ = load_model(path, shard=shard_for_rank(rank, world_size))
    mine = list(range(rank, len(prompts), world_size))
    held = {i: m.slot_experts for i, layer in enumerate(model.layers)
            if (m := getattr(layer, "mlp", None)) is not None and getattr(m, "slot_experts", None) is not None}
    if not mine:
        with torch.inference_mode():
            for _ in range(decode_steps + 1):
                enter_collectives_without_tokens(model)
        return {"prompts": [], "held": held}
    run = greedy_run(model, [prompts[i] for i in mine], decode_steps)
    return {"prompts": mine, "held": held, **run}


def ep_rank_rebalancing(rank: int, world_size: int, path: Path, prompts: list[list[int]], decode_steps: int,
                        switch_after: int, num_redundant: int) -> dict[str, Any]:
    """`ep_rank`, recording expert loads, with EPLB applied (new placement, weights moved) after step
    `switch_after`; reports the metrics collected at the switch and the placements before and after."""
    model, _ = load_model(path, shard=shard_for_rank(rank, world_size))
    recorder = ExpertLoadRecorder(model)
    fetch = CheckpointExperts(SafetensorsCheckpoint(path))
    report: dict[str, Any] = {}

    def between(step: int) -> None:
        if step == switch_after:
            report["metrics_before"] = metrics.collect(model)
            report["loads"] = recorder.global_counts()
            report["held_before"] = [m.slot_experts for m in _moe(model)]
            report["plans"] = rebalance(model, recorder, rank, world_size, num_redundant, fetch)
            report["held_after"] = [m.slot_experts for m in _moe(model)]

    mine = list(range(rank, len(prompts), world_size))
    if mine:
        report.update(greedy_run(model, [prompts[i] for i in mine], decode_steps, between))
    else:
        with torch.inference_mode():
            for step in range(decode_steps + 1):
                enter_collectives_without_tokens(model)
                if step < decode_steps:
                    between(step)
    report["metrics_after"] = metrics.collect(model)
    report["prompts"] = mine
    return report


def _moe(model: torch.nn.Module) -> list[Any]:
    return [layer.mlp for layer in model.layers if getattr(getattr(layer, "mlp", None), "slot_experts", None)]
