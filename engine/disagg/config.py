"""Configuration of a disaggregated deployment: how many workers of each role, and the hand-off limits."""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("prefill", "decode", "both")


@dataclass(frozen=True)
class DisaggConfig:
    """`prefill_workers` + `decode_workers` + `both_workers` engine processes.

    With at least one prefill and one decode worker a request is prefilled on one and decoded on the other;
    with only `both` workers the router balances whole requests (the colocated baseline).
    `pin_cores`: give each worker a disjoint set of this process's cores (`os.sched_setaffinity`) when
    there are at least as many cores as workers. `handoff_timeout_s`: the longest a decode worker may take
    to take in one hand-off (a slow or dead transport ends the request with an error instead of hanging).
    `restart_workers`: start a replacement for a worker process that died. `ready_timeout_s`: the longest
    a worker process may take to load its model.
    """

    prefill_workers: int = 1
    decode_workers: int = 1
    both_workers: int = 0
    pin_cores: bool = True
    handoff_timeout_s: float = 30.0
    restart_workers: bool = True
    ready_timeout_s: float = 300.0
    transport: str = "shm"  # "shm": a shared-memory segment per hand-off (one machine; the only one built)

    def __post_init__(self) -> None:
        checks = [
            (min(self.prefill_workers, self.decode_workers, self.both_workers) >= 0, "worker counts must be >= 0"),
            (self.prefill_workers + self.decode_workers + self.both_workers >= 1, "at least one worker is needed"),
            ((self.prefill_workers == 0) == (self.decode_workers == 0) or self.both_workers > 0,
             "prefill workers need decode workers (and the other way round), unless both-role workers serve"),
            (self.handoff_timeout_s > 0, "handoff_timeout_s must be > 0"),
            (self.ready_timeout_s > 0, "ready_timeout_s must be > 0"),
            (self.transport == "shm", f"transport must be 'shm' (the Ray transport is not built), got {self.transport!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def roles(self) -> list[str]:
        """The role of each worker, by worker index."""
        return ["prefill"] * self.prefill_workers + ["decode"] * self.decode_workers + ["both"] * self.both_workers


def split_cores(cores: list[int], workers: int) -> list[tuple[int, ...] | None]:
    """Disjoint core sets, one per worker (None for all: fewer cores than workers cannot be disjoint)."""
    if workers < 1 or len(cores) < workers:
        return [None] * workers
    per, extra = divmod(len(cores), workers)
    out: list[tuple[int, ...] | None] = []
    at = 0
    for w in range(workers):
        n = per + (1 if w < extra else 0)
        out.append(tuple(cores[at:at + n]))
        at += n
    return out
