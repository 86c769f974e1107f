"""What the router and the worker processes send each other (pickled: over a pipe, or as Ray call arguments).

Router -> worker: `Generate` (a whole request, `both` role), `Reserve` (decode: allocate the blocks first),
`Prefill` (prefill: compute the prompt, sample the first token, capture the KV past `skip_blocks`),
`Install` (decode: take the hand-off in and continue), `Abort`, `SetRole`, `Stop`.
Worker -> router: `Ready`, `Outputs`, `Reserved`, `Prefilled`, `Installed`, `RequestFailed`, `Stats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipe.engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class Generate:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class Reserve:
    """Decode side, first: allocate blocks for every choice's prompt + first token (may wait for memory)."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class Prefill:
    """Prefill side: the decode worker already holds the first `skip_blocks` blocks (by chained hash)."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    skip_blocks: int


@dataclass(frozen=True)
class SeqHandoff:
    """One choice's state after prefill: its first token, and where its blocks start in the payload.

    `first_block`: the first block of the choice's block table the payload carries (choice 0 from the
    decode side's `skip_blocks`; a later choice from the blocks it shares with choice 0). `replay_ids`:
    the tokens a fresh constraint matcher must accept to reach the prefill side's state (the first token).
    """

    index: int
    first_token: int
    first_block: int
    num_blocks: int
    replay_ids: tuple[int, ...]


@dataclass(frozen=True)
class Handoff:
    """A request leaving prefill: its continuing choices, the KV payload handle, and prefill's accounting."""

    request_id: str
    seqs: tuple[SeqHandoff, ...]
    ended: tuple[int, ...]  # choices that ended at prefill (their reservation is released)
    payload: Any  # transport handle
    cached_tokens: int
    payload_bytes: int
    capture_s: float  # time the prefill side spent reading the blocks and writing the payload
    skip_blocks: int = 0  # choice 0's leading blocks the decode side already held


@dataclass(frozen=True)
class Install:
    handoff: Handoff


@dataclass(frozen=True)
class Abort:
    request_id: str


@dataclass(frozen=True)
class SetRole:
    role: str


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    worker_id: int
    pid: int
    role: str
    model_info: Any
    max_model_len: int
    block_size: int
    cores: tuple[int, ...] | None


@dataclass(frozen=True)
class Outputs:
    outputs: list[Any]  # RequestOutput


@dataclass(frozen=True)
class Reserved:
    request_id: str
    held_blocks: int


@dataclass(frozen=True)
class Prefilled:
    handoff: Handoff


@dataclass(frozen=True)
class Installed:
    request_id: str
    install_s: float  # time the decode side spent reading the payload into its pool
    num_blocks: int


@dataclass(frozen=True)
class RequestFailed:
    request_id: str
    message: str
    bad_request: bool = False  # the engine refused it as given (a client error), not a failure


@dataclass(frozen=True)
class Stats:
    """A worker's load, sent a few times a second and after each step that changed it."""

    worker_id: int
    role: str
    running: int
    waiting: int
    kv_usage: float
    queued_prompt_tokens: int
    steps: int
    model_busy_s: float
    step_times: list[tuple[int, int, float]] = field(default_factory=list)  # (tokens, seqs, seconds) since last
    swa_sessions: Any = None  # the worker's session-cache counters (session_cache.SessionStats), None when off
