"""One generated sequence: its tokens, how many of them have KV in the cache, and its block table.

A request with `n > 1` is `n` sequences with the same prompt (`index` 0..n-1). Under asynchronous
scheduling a sequence may have `num_pending` sampled tokens still in flight: they count towards its length
but their ids are only known once the step that samples them is post-processed.
"""

from __future__ import annotations

import enum
import itertools
import time
from typing import Any

from recipe.engine.sampling_params import SamplingParams

_ids = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(self, request_id: str, index: int, prompt_ids: list[int], params: SamplingParams,
                 arrival_time: float | None = None) -> None:
        assert prompt_ids, "a sequence needs at least one prompt token"
        self.seq_id = next(_ids)
        self.request_id = request_id
        self.index = index
        self.params = params
        self.token_ids: list[int] = list(prompt_ids)
        self.num_prompt_tokens = len(prompt_ids)
        self.num_computed_tokens = 0  # tokens whose KV is written (or being written by a step in flight)
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache or a fork
        self.num_pending = 0
        self.block_table: list[int] = []
        self.num_hashed_blocks = 0  # leading blocks of block_table registered in the prefix cache
        self.block_hashes: list[bytes] = []
        self.num_stored_blocks = 0  # leading blocks handed to the lower KV tiers (block_manager.offload)
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.stop_token_id: int | None = None
        self.fork_parent: Sequence | None = None
        self.matcher: Any = params.constraint.matcher() if params.constraint is not None else None
        self.arrival_time = time.perf_counter() if arrival_time is None else arrival_time
        self.scheduled_time: float | None = None  # when a step first included it
        self.token_times: list[float] = []
        self.logprobs: list[tuple[float, list[tuple[int, float]]] | None] = []
        self.num_preemptions = 0
        self.draft_ids: list[int] = []  # speculative tokens to verify in the next step (engine/speculative)

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id}#{self.index}, status={self.status.value}, len={len(self)}, "
                f"computed={self.num_computed_tokens}, pending={self.num_pending})")

    def __len__(self) -> int:
        """Tokens known or in flight."""
        return len(self.token_ids) + self.num_pending

    @property
    def num_output_tokens(self) -> int:
        return len(self) - self.num_prompt_tokens

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def prompt_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    def num_blocks_for(self, num_tokens: int, block_size: int) -> int:
        return (num_tokens + block_size - 1) // block_size
