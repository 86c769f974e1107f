"""The engine's two faces: `EngineCore`, what every engine that steps implements, and `EngineClient`, what a
server streams through.

Why two and not one: the colocated engine (`llm_engine.LLMEngine`), the expert-parallel driver
(`expert_parallel.ep_engine.ExpertParallelEngine`) and the disaggregated worker's engine (an `LLMEngine`
with a `kv_connector.handoff_connector.HandoffConnector`) all share one step-driven surface: add a request, abort it, `step()` and
get the output deltas of the step that completed, shut down. A disaggregated deployment as a whole
(`recipe.cluster.router.DisaggLLM`) has no step a caller could drive: its steps run in worker processes,
each an `EngineCore`, and its outputs arrive as messages on the router's event loop. Forcing it into
`step()` would put a polling thread around an asyncio router; folding `generate` into the core would make
a thread part of every engine. So the step-driven surface is the one engine protocol, implemented where
each deployment steps, and `AsyncLLM` depends on it alone; the streaming surface over it (`AsyncLLM`,
and `DisaggLLM` over its workers' cores) is `EngineClient`, which the server depends on alone (as vLLM's
`EngineClient` protocol fronts its `AsyncLLM`).

Outputs are `outputs.RequestOutput` deltas in both faces: the tokens produced since the previous output of
that choice, `finished` on its last.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from recipe.engine.config import EngineConfig
    from recipe.engine.outputs import RequestOutput
    from recipe.engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class EngineStats:
    """Counters since the engine started, and its load now (a snapshot)."""

    running: int
    waiting: int
    kv_usage: float
    num_kv_blocks: int
    prefix_cache_queries: int  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int  # of which found
    prompt_tokens: int
    output_tokens: int
    steps: int
    model_busy_s: float  # time the model thread spent running steps
    kv_tiers: Any = None  # kv_tiers.TierSnapshot when the lower KV tiers are on
    restored_tokens: int = 0  # prompt tokens restored from the lower KV tiers (part of prefix_cache_hits)
    speculative: Any = None  # speculative.SpecMetrics when speculative decoding is on
    swa_sessions: Any = None  # session_cache.SessionStats (a copy) when the sliding-window session cache is on


@runtime_checkable
class EngineCore(Protocol):
    """An engine the caller steps. Not thread-safe, except `validate` (it reads only fixed facts) and
    `num_waiting_requests` (it reads a snapshot)."""

    config: EngineConfig
    model_info: Any  # models.ModelInfo
    max_model_len: int  # most tokens (prompt + output) one sequence may hold

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> list[int]:
        """The prompt's ids if this engine can run the request; else `ValueError` (or `TypeError`) naming why."""
        ...

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    arrival_time: float | None = None) -> None:
        """Queue a request (its `params.n` choices); `ValueError` for a bad one or an id in use."""
        ...

    def abort_request(self, request_id: str) -> list[RequestOutput]:
        """End a request now, freeing its KV; its final outputs (reason "abort"), none if it is not held."""
        ...

    def step(self) -> list[RequestOutput]:
        """Run one step; the output deltas of the step that completed (none while the first is in flight)."""
        ...

    def has_unfinished_requests(self) -> bool:
        """Whether `step()` has anything left to do."""
        ...

    def has_request(self, request_id: str) -> bool:
        """Whether the engine still holds the request (not finished, not aborted)."""
        ...

    def num_waiting_requests(self) -> int:
        """Requests queued and not yet started (or preempted)."""
        ...

    def stats(self) -> EngineStats: ...

    def compute_path(self) -> str:
        """One line naming the weights and kernels a step runs (`recipe serve` prints it at start-up)."""
        ...

    def shutdown(self) -> None:
        """Stop: nothing runs after this; in-flight steps are dropped, processes and files released."""
        ...


@runtime_checkable
class EngineClient(Protocol):
    """An engine behind asyncio streams. Safe to call from an event loop."""

    @property
    def model_info(self) -> Any: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def is_running(self) -> bool:
        """False once the engine failed or was shut down."""
        ...

    @property
    def error(self) -> BaseException | None:
        """Why the engine failed, or None."""
        ...

    def compute_path(self) -> str | None:
        """Its engine core's `compute_path`; None where no single core runs the steps (a cluster)."""
        ...

    def health_problem(self) -> str | None:
        """None while the engine can serve; else what is wrong, in a few words (for /health)."""
        ...

    def stats(self) -> EngineStats: ...

    def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams
                 ) -> AsyncIterator[RequestOutput]:
        """Stream a request's output deltas until all its choices finish. `ValueError`: a bad request;
        `async_engine.QueueFullError`: too many wait; `async_engine.EngineDeadError`: not running."""
        ...

    async def abort(self, request_id: str) -> None:
        """Abort a request; its stream ends with reason "abort"."""
        ...

    async def shutdown(self) -> None:
        """Stop; open streams end with `EngineDeadError`."""
        ...
