"""The router's live latency and load figures: rolling windows of TTFT and TPOT, and their percentiles."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by the nearest-rank rule; 0.0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s) - 1e-9) - 1))
    return s[k]


class Window:
    """Samples of the last `seconds` (clock injectable for tests)."""

    def __init__(self, seconds: float = 30.0, clock=time.monotonic) -> None:  # type: ignore[no-untyped-def]
        self.seconds, self.clock = seconds, clock
        self._items: deque[tuple[float, float]] = deque()

    def add(self, value: float) -> None:
        self._items.append((self.clock(), value))
        self._trim()

    def values(self) -> list[float]:
        self._trim()
        return [v for _, v in self._items]

    def _trim(self) -> None:
        cut = self.clock() - self.seconds
        while self._items and self._items[0][0] < cut:
            self._items.popleft()


@dataclass(frozen=True)
class LiveMetrics:
    """What the autoscaler reads (see `autoscaler.py`)."""

    prefill_queue_tokens: int
    ttft_p90_s: float
    decode_kv_usage: float
    tpot_p90_s: float
    prefill_workers: int
    decode_workers: int
