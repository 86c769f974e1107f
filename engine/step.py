"""The data of one model step: what `ModelRunner.prepare` copies for it (`PreparedStep`) and what `execute`
returns (`StepResult`). A leaf: the runner, the speculative verifier and the start-up probes all build or
read these, so none of them imports another for the types. What a drafter learns from a step it reads here
(`Drafter.after_step(step, result)`), not from the runner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from recipe.engine.sampler import SamplingRow

if TYPE_CHECKING:
    import torch


@dataclass
class PreparedStep:
    input_ids: np.ndarray  # int64 [N], PLACEHOLDER where the previous step's token goes
    placeholders: list[tuple[int, int]]  # (flat index into input_ids, seq_id that sampled it)
    positions: np.ndarray  # int64 [N]
    slot_mapping: np.ndarray  # int64 [N]
    query_lens: list[int]
    context_lens: list[int]
    block_tables: np.ndarray  # int64 [B, max_blocks], -1 padded
    sample_rows: list[int]  # flat index of each sampling sequence's last token
    sample_seq_ids: list[int]
    rows: list[SamplingRow]
    matchers: list[Any]
    pending_history: list[bool] = field(default_factory=list)  # row's histories lack the placeholder token
    kv_writes: list[Callable[[], None]] = field(default_factory=list)  # restored KV, written before forward
    kind_tables: dict[str, np.ndarray] | None = None  # several cache kinds: kind -> [B, max_blocks], -1 padded
    draft_ids: list[list[int]] = field(default_factory=list)  # per sampling row: its speculative tokens
    next_ids: list[int] = field(default_factory=list)  # per span: the known token after its last input (-1: sampled)


@dataclass
class StepResult:
    token_ids: list[int]
    logprobs: list[Any]
    terminated: list[bool]  # the row's constraint matcher terminated after accepting its token
    start_time: float
    end_time: float
    # The row's constraint has no way on: it allowed no token, or refused the sampled one. The row's token
    # is not part of the output; the sequence ends with finish reason "dead_end".
    dead_end: list[bool] = field(default_factory=list)
    # Speculative steps (engine/speculative/verification.py): per row, the tokens it emits (accepted drafts,
    # then the target's own; none past a dead end), their logprobs, and how many drafts were accepted.
    emitted: list[list[int]] | None = None
    emitted_logprobs: list[list[Any]] | None = None
    num_accepted: list[int] | None = None
    input_ids: np.ndarray | None = None  # the inputs forward ran on: the step's, placeholders filled
    # per row: the final hidden state of the position whose logits gave the row's last emitted token
    hidden: torch.Tensor | None = None


class StepObserver(Protocol):
    """What reads each step after it ran, on the model thread, before the next step starts (the speculator's
    drafter; a tool that logs hidden states)."""

    def after_step(self, step: PreparedStep, result: StepResult) -> None: ...
