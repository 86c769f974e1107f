"""What the engine hands back: per-request output deltas (streaming) or complete outputs (`LLM.generate`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

TokenLogprob = tuple[float, list[tuple[int, float]]]  # (chosen token's logprob, [(id, logprob), ...] top k)


@dataclass(frozen=True)
class RequestTiming:
    """Monotonic (`time.perf_counter`) times: arrival, first scheduled (end of queueing), first token, and
    each token in this output."""

    arrival_time: float
    first_token_time: float | None
    token_times: tuple[float, ...]
    scheduled_time: float | None = None

    @property
    def queue_time(self) -> float | None:
        """Seconds between arrival and the first step that ran the request."""
        return None if self.scheduled_time is None else self.scheduled_time - self.arrival_time

    @property
    def ttft(self) -> float | None:
        """Time to first token, in seconds."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def inter_token_latencies(self) -> tuple[float, ...]:
        t = self.token_times
        return tuple(b - a for a, b in itertools.pairwise(t))


@dataclass(frozen=True)
class RequestOutput:
    """One choice (`index`) of one request.

    From `AsyncLLM.generate` it is a delta: the tokens produced since the previous output. From
    `LLM.generate` it is complete: `new_token_ids` holds the whole output and `text` its decoding.
    `finish_reason` is "stop" (EOS, a stop token or a terminated constraint), "length" (max_tokens or the
    context limit), "abort", or "dead_end": the output constraint allowed no token, or refused the one
    sampled, before it could terminate; the output so far is incomplete and never leaves the constraint.
    `stop_token_id` names the token that stopped it (not part of the output).
    """

    request_id: str
    index: int
    new_token_ids: tuple[int, ...]
    new_logprobs: tuple[TokenLogprob | None, ...] | None
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    timing: RequestTiming
    stop_token_id: int | None = None
    text: str | None = None

    @property
    def token_ids(self) -> tuple[int, ...]:
        return self.new_token_ids
