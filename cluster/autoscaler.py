"""The autoscaler: moves one worker at a time between the prefill and decode roles as load shifts.

`Autoscaler.observe(metrics, now)` is the policy, a pure function of the metric stream and its own state:
- prefill pressure = max(queued prompt tokens per prefill worker / `queue_tokens_high`, TTFT p90 / TTFT SLO);
- decode pressure = max(decode KV use / `kv_high`, TPOT p90 / TPOT SLO);
  a latency percentile counts only while its role has work (prompt tokens queued; KV in use): the rolling
  p90 lags the load, and a worker moved to a role with nothing waiting cannot help (a live run moved one
  to prefill on a 58 s TTFT p90 left over from a backlog already gone, and back 34 s later);
- a move prefill -> decode is wanted when decode pressure > 1 and prefill pressure < `low` (and the other
  way round), and only when it would leave `min_per_role` workers in the role it leaves;
- hysteresis: the same want must hold for `confirm` consecutive observations; a cooldown of `cooldown_s`
  follows every move. Each decision carries its reason (the figures that caused it).
`AutoscalerLoop` runs the policy on the router's live metrics and applies each decision with
`DisaggLLM.move_worker` (drain, re-label, re-admit): capacity moves only that way, and no request is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recipe.cluster.live_metrics import LiveMetrics

if TYPE_CHECKING:
    from recipe.cluster.router import DisaggLLM

log = logging.getLogger("recipe.disagg.autoscaler")


@dataclass(frozen=True)
class AutoscalerPolicy:
    ttft_slo_s: float = 2.0
    tpot_slo_s: float = 0.25
    queue_tokens_high: int = 2048  # queued prompt tokens per prefill worker that count as full pressure
    kv_high: float = 0.85
    low: float = 0.6  # the role a worker leaves must be under this pressure
    confirm: int = 3  # consecutive observations before a move
    cooldown_s: float = 20.0
    min_per_role: int = 1

    def __post_init__(self) -> None:
        if not (0 < self.low < 1 and self.confirm >= 1 and self.cooldown_s >= 0 and self.min_per_role >= 0):
            raise ValueError("autoscaler policy: need 0 < low < 1, confirm >= 1, cooldown_s >= 0, min_per_role >= 0")


@dataclass(frozen=True)
class Decision:
    time: float
    from_role: str
    to_role: str
    reason: str
    prefill_pressure: float
    decode_pressure: float


def pressures(m: LiveMetrics, p: AutoscalerPolicy) -> tuple[float, float]:
    ttft = m.ttft_p90_s / p.ttft_slo_s if m.prefill_queue_tokens > 0 else 0.0
    tpot = m.tpot_p90_s / p.tpot_slo_s if m.decode_kv_usage > 0 else 0.0
    pre = max(m.prefill_queue_tokens / max(1, m.prefill_workers) / p.queue_tokens_high, ttft)
    dec = max(m.decode_kv_usage / p.kv_high, tpot)
    return pre, dec


class Autoscaler:
    """The policy and its state (see the module docstring)."""

    def __init__(self, policy: AutoscalerPolicy | None = None) -> None:
        self.policy = policy or AutoscalerPolicy()
        self._want: tuple[str, str] | None = None
        self._streak = 0
        self._last_move = float("-inf")
        self.decisions: list[Decision] = []

    def observe(self, m: LiveMetrics, now: float) -> Decision | None:
        p = self.policy
        pre, dec = pressures(m, p)
        want: tuple[str, str] | None = None
        if dec > 1 and pre < p.low and m.prefill_workers > p.min_per_role:
            want = ("prefill", "decode")
        elif pre > 1 and dec < p.low and m.decode_workers > p.min_per_role:
            want = ("decode", "prefill")
        self._streak = self._streak + 1 if want is not None and want == self._want else (1 if want else 0)
        self._want = want
        if want is None or self._streak < p.confirm or now - self._last_move < p.cooldown_s:
            return None
        reason = (f"{want[1]} pressure {max(pre, dec):.2f} > 1 while {want[0]} pressure {min(pre, dec):.2f} < "
                  f"{p.low} for {self._streak} observations (prefill queue {m.prefill_queue_tokens} tokens on "
                  f"{m.prefill_workers} workers, TTFT p90 {m.ttft_p90_s:.3f}s, decode KV {m.decode_kv_usage:.2f}, "
                  f"TPOT p90 {m.tpot_p90_s:.3f}s)")
        d = Decision(now, want[0], want[1], reason, pre, dec)
        self._last_move, self._streak, self._want = now, 0, None
        self.decisions.append(d)
        return d


class AutoscalerLoop:
    """Runs an `Autoscaler` every `interval_s` on a router's live metrics, on its own thread."""

    def __init__(self, router: DisaggLLM, policy: AutoscalerPolicy | None = None, interval_s: float = 1.0) -> None:
        self.router, self.interval_s = router, interval_s
        self.autoscaler = Autoscaler(policy)
        self.moves_done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recipe-autoscaler", daemon=True)

    @property
    def decisions(self) -> list[Decision]:
        return self.autoscaler.decisions

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        while not self._stop.is_set():
            d = self.autoscaler.observe(self.router.live_metrics(), time.monotonic())
            if d is not None:
                await self.apply(d)
            await asyncio.sleep(self.interval_s)

    async def apply(self, d: Decision) -> None:
        candidates = [w for w in self.router.workers() if w["role"] == d.from_role and w["state"] == "ready"]
        if not candidates:
            return
        w = min(candidates, key=lambda w: (w["active_requests"], w["id"]))
        log.info("autoscaler: moving worker %d %s -> %s: %s", w["id"], d.from_role, d.to_role, d.reason)
        await self.router.move_worker(w["id"], d.to_role)
        self.moves_done += 1
