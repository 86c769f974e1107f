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

    `ray_address` (an address, or `auto`): run the workers as Ray actors on an existing Ray cluster instead
    of local processes, one placement-group bundle of `ray_cpus_per_worker` CPUs each, spread over the
    nodes; the hand-off then goes through the Ray object store (`transport` becomes `ray`: nodes share no
    memory). `ray_ship_model`: a model given as a local path is sent to the workers through the object
    store (nodes share no filesystem); off when the path exists on every node.
    """

    prefill_workers: int = 1
    decode_workers: int = 1
    both_workers: int = 0
    pin_cores: bool = True
    handoff_timeout_s: float = 30.0
    restart_workers: bool = True
    ready_timeout_s: float = 300.0
    transport: str = "shm"  # "shm": a shared-memory segment per hand-off (one machine); "ray": object store
    ray_address: str | None = None
    ray_cpus_per_worker: float = 1.0
    ray_ship_model: bool = True

    def __post_init__(self) -> None:
        if self.ray_address is not None and self.transport == "shm":
            object.__setattr__(self, "transport", "ray")  # Ray nodes share no memory
        checks = [
            (min(self.prefill_workers, self.decode_workers, self.both_workers) >= 0, "worker counts must be >= 0"),
            (self.prefill_workers + self.decode_workers + self.both_workers >= 1, "at least one worker is needed"),
            ((self.prefill_workers == 0) == (self.decode_workers == 0) or self.both_workers > 0,
             "prefill workers need decode workers (and the other way round), unless both-role workers serve"),
            (self.handoff_timeout_s > 0, "handoff_timeout_s must be > 0"),
            (self.ready_timeout_s > 0, "ready_timeout_s must be > 0"),
            (self.transport in ("shm", "ray"), f"transport must be 'shm' or 'ray', got {self.transport!r}"),
            (self.transport != "ray" or self.ray_address is not None, "the 'ray' transport needs ray_address"),
            (self.ray_address is None or bool(self.ray_address.strip()), "ray_address must not be empty"),
            (self.ray_cpus_per_worker > 0, "ray_cpus_per_worker must be > 0"),
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
