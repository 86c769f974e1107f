"""Dispatch and combine: all-to-all exchanges of rows with variable split sizes.

Every rank must call these in the same order, even with zero rows to send (the counts exchange still
runs, and the data exchange moves empty splits). Time spent inside the collectives is added to `timer`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class CommTimer:
    """Seconds spent in all-to-all calls and how many calls, since the last reset."""

    seconds: float = 0.0
    calls: int = 0

    def add(self, start: float) -> None:
        self.seconds += time.perf_counter() - start
        self.calls += 1


def exchange_counts(send_counts: torch.Tensor, timer: CommTimer | None = None) -> torch.Tensor:
    """send_counts [world] int64 (rows for each rank) -> recv_counts [world] (rows from each rank)."""
    start = time.perf_counter()
    recv = torch.empty_like(send_counts)
    dist.all_to_all_single(recv, send_counts)
    if timer is not None:
        timer.add(start)
    return recv


def exchange_rows(rows: torch.Tensor, send_counts: list[int], recv_counts: list[int],
                  timer: CommTimer | None = None) -> torch.Tensor:
    """rows [sum(send_counts), ...], grouped by destination rank in rank order -> the rows sent to this rank,
    grouped by source rank in rank order ([sum(recv_counts), ...])."""
    start = time.perf_counter()
    out = rows.new_empty((sum(recv_counts), *rows.shape[1:]))
    dist.all_to_all_single(out, rows.contiguous(), output_split_sizes=recv_counts, input_split_sizes=send_counts)
    if timer is not None:
        timer.add(start)
    return out
