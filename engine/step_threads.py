"""Intra-op CPU threads per step, chosen by a start-up profile (`EngineConfig.step_threads="auto"`).

A small model's ops are too small to pay for several OpenMP threads: a decode step of a tiny model can run
faster on one thread than on two, while a long prefill chunk of the same model pays for every core. The
profile times real steps (`engine/probe_step.py`) on the model thread at a growing number of tokens per
step (decode rows while they fit in `max_num_seqs`, then one prefill chunk), each with 1, 2, 4, ... up to
`num_threads` threads, the fastest of a few interleaved runs per count, and keeps the fastest count per
bucket. It stops at the first bucket that wants every thread (more tokens only pay more for threads), or
before a bucket whose probe (about `_BUCKET_GROWTH` times the last one's time) would end past its time
budget; steps larger than the last bucket measured run on every thread.

Only the thread count changes, so the tokens are those of the fixed count up to float summation order
(tests: greedy tokens equal, logits close).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from recipe.engine.probe_step import probe_fits, probe_step

_CONTEXT = 32  # tokens before each probe's positions (decode rows read a short history)
_BUCKET_GROWTH = 4  # bucket sizes 1, 4, 16, 64, ... tokens per step


@dataclass(frozen=True)
class StepThreads:
    """`buckets`: (most tokens in a step, threads) ascending by tokens; larger steps get `num_threads`."""

    buckets: tuple[tuple[int, int], ...]
    num_threads: int

    def threads_for(self, num_tokens: int) -> int:
        for most, threads in self.buckets:
            if num_tokens <= most:
                return threads
        return self.num_threads


def thread_counts(num_threads: int) -> list[int]:
    """The counts a profile tries: powers of two below `num_threads`, and `num_threads` itself."""
    counts = [1 << i for i in range(num_threads.bit_length()) if 1 << i < num_threads]
    return [*counts, num_threads]


def profile_step_threads(runner: Any, *, num_threads: int, max_seqs: int, max_tokens: int,
                         budget_s: float = 1.5, repeats: int = 3) -> StepThreads:
    """Measure on the calling thread (the model thread); leaves it at `num_threads` threads."""
    counts = thread_counts(num_threads)
    buckets: list[tuple[int, int]] = []
    deadline = time.perf_counter() + budget_s
    tokens, cost = 1, 0.0  # cost: the last probe's seconds, times the growth: about what the next one takes
    try:
        while tokens <= max_tokens and len(counts) > 1 and time.perf_counter() + cost < deadline:
            seqs, query = (tokens, 1) if tokens <= max_seqs else (1, tokens)
            if not probe_fits(runner, seqs, query, _CONTEXT):
                break
            t0 = time.perf_counter()
            best = _fastest(runner, probe_step(runner, seqs, query, _CONTEXT, drafts=False), counts, repeats)
            cost = (time.perf_counter() - t0) * _BUCKET_GROWTH
            buckets.append((tokens, best))
            if best == num_threads:
                break
            tokens *= _BUCKET_GROWTH
    finally:
        torch.set_num_threads(num_threads)
    return StepThreads(tuple(buckets), num_threads)


def _fastest(runner: Any, step: Any, counts: list[int], repeats: int) -> int:
    """The thread count of the fastest run (one warm-up per count; runs interleaved, so that load that comes
    and goes on a shared machine falls on every count alike)."""
    best = {n: float("inf") for n in counts}
    for r in range(repeats + 1):
        for n in counts:
            torch.set_num_threads(n)
            t0 = time.perf_counter()
            runner.execute(step)
            elapsed = time.perf_counter() - t0
            if r:
                best[n] = min(best[n], elapsed)
    return min(counts, key=lambda n: best[n])
