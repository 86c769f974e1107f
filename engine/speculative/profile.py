"""Start-up profile of the verification step: time of real model steps over a grid of (sequences, tokens).

Each probe is a step of `num_seqs` sequences that each score `query_len` positions after a short context,
run through `ModelRunner.execute` with drafts, so it times the forward, the logits of every position and
the verification. It writes only into free KV blocks (nothing is cached yet) and samples nothing anyone
keeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from recipe.engine.probe_step import probe_step
from recipe.engine.speculative.cost_model import StepCost
from recipe.engine.step import PreparedStep, StepResult


def profile_step_cost(runner: Any, *, max_seqs: int, max_query: int, context: int = 64, repeats: int = 3,
                      grid: bool = True, convex: bool = True,
                      after_step: Callable[[PreparedStep, StepResult], None] | None = None) -> StepCost:
    """Fit `StepCost` to the fastest of `repeats` runs per grid point (after a warm-up pass), the grid run in
    `repeats` passes.

    The grid includes plain decode steps (one position per sequence): k=0 is what every draft is weighed
    against, so its cost is measured, not extrapolated from verify steps. The fastest run, since on a shared
    machine the slower ones time other processes. One sequence is measured at every query length up to 7 (a
    few rows may cost about one, and the linear backend changes path at 4 and 7 rows); `grid`: `StepCost`
    interpolates the measurements (else a least-squares plane), `convex` fitted convex in tokens (else
    non-decreasing). `after_step`: the drafter's, timed with each step as the engine runs it."""
    bs = runner.block_size
    context = max(0, min(context, runner.num_blocks * bs - max_query))  # a small pool: a shorter context
    per_seq = -(-(context + max_query) // bs)
    top = max(1, min(max_seqs, runner.num_blocks // per_seq))
    seq_grid = sorted({1, max(1, top // 2), top})
    # one sequence: every query length up to 7, where the linear backend changes path; more sequences: fewer
    query_grid = {1: sorted({*range(1, min(max_query, 7) + 1), max_query})}
    wide = sorted({q for q in (1, 2, 3, 5, max_query) if q <= max_query})
    steps = {(b, q): probe_step(runner, b, q, context) for b in seq_grid for q in query_grid.get(b, wide)}
    def run(step: PreparedStep) -> None:
        result = runner.execute(step)
        if after_step is not None:
            after_step(step, result)

    for step in steps.values():
        run(step)  # warm-up
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(repeats):  # whole passes over the grid: a burst of load slows one run of many points, not
        for key, step in steps.items():  # every run of a few
            t0 = time.perf_counter()
            run(step)
            best[key] = min(best[key], time.perf_counter() - t0)
    return StepCost.fit([(b, b * q, t) for (b, q), t in best.items()], grid=grid, convex=convex)
