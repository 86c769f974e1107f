"""Launching expert-parallel ranks: N processes joined in one `torch.distributed` group (gloo on the CPU,
NCCL where every rank has a GPU), on one host over a loopback TCP rendezvous.

`run_ranks` runs a function on every rank and returns each rank's result; it ends every process it
started, by pid, whatever happens (a rank's exception is raised in the caller with the rank's traceback).
"""

from __future__ import annotations

import io
import os
import queue
import signal
import socket
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class RankFailed(RuntimeError):
    """A rank raised, or the ranks did not all answer in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def init_rank(rank: int, world_size: int, port: int, backend: str | None = None, timeout_s: float = 120.0) -> None:
    """Join the group of `world_size` ranks meeting at 127.0.0.1:`port` (on a GPU, rank r uses device r)."""
    backend = backend or default_backend()
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))


def _to_bytes(value: Any) -> bytes:
    """Results travel as bytes: a tensor sent through a torch queue is shared memory that dies with its rank."""
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _rank_main(target: Callable[..., Any], rank: int, world_size: int, port: int, backend: str | None,
               threads: int, args: Sequence[Any], results: Any) -> None:
    torch.set_num_threads(threads)
    try:
        init_rank(rank, world_size, port, backend)
        try:
            results.put((rank, True, _to_bytes(target(rank, world_size, *args))))
        finally:
            dist.destroy_process_group()
    except BaseException:  # reported to the caller, which raises it
        results.put((rank, False, traceback.format_exc()))


def run_ranks(target: Callable[..., Any], world_size: int, args: Sequence[Any] = (), *, timeout_s: float = 300.0,
              backend: str | None = None, threads_per_rank: int = 1) -> list[Any]:
    """`target(rank, world_size, *args)` on `world_size` fresh processes (spawned; `target` must be importable);
    returns the results in rank order."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(target, r, world_size, port, backend, threads_per_rank, args,
                                                  results), daemon=True) for r in range(world_size)]
    try:
        for p in procs:
            p.start()
        got: dict[int, Any] = {}
        while len(got) < world_size:
            try:
                rank, ok, value = results.get(timeout=timeout_s)
            except queue.Empty:
                raise RankFailed(f"ranks {sorted(set(range(world_size)) - set(got))} did not answer in {timeout_s}s") from None
            if not ok:
                raise RankFailed(f"rank {rank} failed:\n{value}")
            got[rank] = torch.load(io.BytesIO(value), weights_only=False)
        for p in procs:
            p.join(timeout=30)
        return [got[r] for r in range(world_size)]
    finally:
        end_processes(procs)
        results.close()


def end_processes(procs: Sequence[Any]) -> None:
    """Kill every still-running process of `procs` by its pid and reap it."""
    for p in procs:
        if p.pid is not None and p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        if p.pid is not None:
            p.join(timeout=10)
