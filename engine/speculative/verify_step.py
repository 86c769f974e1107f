"""The model runner's speculative branch: logits of every drafted position, then `verification.verify`."""

from __future__ import annotations

import time
from typing import Any

import torch
from recipe.engine import device as devices
from recipe.engine.speculative.verification import verify
from recipe.engine.step import PreparedStep, StepResult


def verify_step(runner: Any, step: PreparedStep, hidden: torch.Tensor, start: float) -> StepResult:
    """A `StepResult` for a step where some rows carry drafts (`step.draft_ids`).

    Row r's positions are the last k_r + 1 inputs of its span: its last known token and its drafts.
    """
    flat = [i for last, d in zip(step.sample_rows, step.draft_ids, strict=True)
            for i in range(last - len(d), last + 1)]
    scored = hidden[torch.tensor(flat, device=hidden.device)]
    logits = runner.model.compute_logits(scored)
    rows = verify(runner.sampler, logits, step.rows, step.draft_ids, step.matchers, logits.shape[1])
    offsets = [0]
    for d in step.draft_ids:
        offsets.append(offsets[-1] + len(d) + 1)
    # the position that produced each row's last emitted token
    picked = scored[torch.tensor([offsets[i] + r.num_accepted for i, r in enumerate(rows)], device=hidden.device)]
    devices.synchronize(runner.device)
    last = [r.emitted[-1] if r.emitted else -1 for r in rows]
    runner._prev = dict(zip(step.sample_seq_ids, last, strict=True))
    return StepResult(
        token_ids=last, logprobs=[r.logprobs[-1] if r.logprobs else None for r in rows],
        terminated=[r.terminated for r in rows], start_time=start, end_time=time.perf_counter(),
        dead_end=[r.dead_end for r in rows], emitted=[r.emitted for r in rows],
        emitted_logprobs=[r.logprobs for r in rows], num_accepted=[r.num_accepted for r in rows], hidden=picked)
