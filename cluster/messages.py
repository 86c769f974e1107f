"""What the router and the worker processes send each other (pickled: over a pipe, or as Ray call arguments).

Router -> worker: `Generate` (a whole request, `both` role), `Reserve` (decode: allocate the blocks first),
`Prefill` (prefill: compute the prompt, sample the first token, capture the KV past `skip_blocks`),
`Install` (decode: take the hand-off in and continue), `Abort`, `SetRole`, `Stop`.
Worker -> router: `Ready`, `Outputs`, `Reserved`, `Prefilled`, `Installed`, `RequestFailed`, `Stats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipe.engine.disagg.handoff_descriptor import Handoff
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
