"""`simulate`: a request trace over instances (`prefill`, `decode`, `both`, or `off`), step by step.

Instances behave as the engine does: a prefill instance runs whole prompts FIFO up to `max_batch_tokens` per
step, samples the first token at the step's end and hands the KV off (`StepCurves.transfer`); a decode
instance runs every running sequence one token per step; a `both` instance runs its decodes and then prompt
chunks in the step's leftover token budget (chunked prefill, decode first). The router sends a prompt to the
prefill-capable instance with the fewest queued prompt tokens and a hand-off to the decode instance with the
fewest running sequences. An `Autoscaler` (the production policy) is asked every `interval_s`; a moved
instance drains (takes no new work, finishes what it has) and changes role `switch_s` later. With
`scale_in_out`, an instance is also switched `off` when both pressures are low and back on when one is high.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from recipe.cluster.autoscaler import Autoscaler, pressures
from recipe.cluster.live_metrics import LiveMetrics, percentile
from recipe.cluster.sim.curves import StepCurves


@dataclass
class SimRequest:
    arrival: float
    prompt: int
    output: int
    first_token: float | None = None
    done: float | None = None
    generated: int = 0
    prefilled: int = 0  # prompt tokens computed (chunked prefill on `both`)

    @property
    def ttft(self) -> float:
        assert self.first_token is not None
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float:
        assert self.done is not None and self.first_token is not None
        return (self.done - self.first_token) / (self.output - 1) if self.output > 1 else 0.0


@dataclass
class Instance:
    iid: int
    role: str
    queue: deque[SimRequest] = field(default_factory=deque)
    running: list[SimRequest] = field(default_factory=list)
    busy: bool = False
    draining_to: str | None = None
    incoming: int = 0  # hand-offs on their way here

    def queued_tokens(self) -> int:
        return sum(r.prompt - r.prefilled for r in self.queue)

    def idle(self) -> bool:
        return not self.queue and not self.running and not self.busy and self.incoming == 0


@dataclass
class SimResult:
    requests: list[SimRequest]
    timeline: list[tuple[float, dict[str, int]]]  # (time, instances per role) after each change
    decisions: list[str]
    instance_seconds: dict[str, float]  # role -> instance-seconds spent in it


class Cluster:
    def __init__(self, curves: StepCurves, roles: list[str], max_batch_tokens: int = 2048,
                 kv_capacity_tokens: int = 1 << 20) -> None:
        self.curves, self.max_batch_tokens, self.kv_capacity_tokens = curves, max_batch_tokens, kv_capacity_tokens
        self.instances = [Instance(i, r) for i, r in enumerate(roles)]
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = itertools.count()
        self.now = 0.0

    def at(self, t: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, payload))

    def route_prompt(self, r: SimRequest) -> None:
        cands = [i for i in self.instances if i.role in ("prefill", "both") and i.draining_to is None]
        if not cands:
            self.at(self.now + 0.05, "arrive", r)  # nothing can take it yet (all moving): try again shortly
            return
        inst = min(cands, key=lambda i: (i.queued_tokens() + (sum(x.output for x in i.running) if i.role == "both" else 0), i.iid))
        inst.queue.append(r)
        self.kick(inst)

    def route_handoff(self, r: SimRequest) -> None:
        cands = [i for i in self.instances if i.role == "decode" and i.draining_to is None]
        if not cands:
            self.at(self.now + 0.05, "handoff", r)
            return
        inst = min(cands, key=lambda i: (len(i.running) + i.incoming, i.iid))
        inst.incoming += 1
        self.at(self.now + self.curves.transfer(r.prompt), "installed", (inst, r))

    def kick(self, inst: Instance) -> None:
        if inst.busy or inst.role == "off":
            return
        budget = self.max_batch_tokens
        batch = list(inst.running) if inst.role in ("decode", "both") else []
        budget -= len(batch)
        chunks: list[tuple[SimRequest, int]] = []
        if inst.role in ("prefill", "both"):
            for r in inst.queue:
                if budget <= 0:
                    break
                n = r.prompt - r.prefilled
                if inst.role == "prefill" and chunks and n > budget:
                    break
                n = n if inst.role == "prefill" else min(n, budget)
                chunks.append((r, n))
                budget -= n
        if not batch and not chunks:
            return
        context = sum(r.prompt + r.generated for r in batch)
        t = self.curves.step(sum(n for _, n in chunks), len(batch), context)
        inst.busy = True
        self.at(self.now + t, "step", (inst, batch, chunks))

    def step_done(self, inst: Instance, batch: list[SimRequest], chunks: list[tuple[SimRequest, int]]) -> None:
        inst.busy = False
        for r in batch:
            r.generated += 1
            if r.generated >= r.output:
                r.done = self.now
                inst.running.remove(r)
        for r, n in chunks:
            r.prefilled += n
            if r.prefilled >= r.prompt:
                inst.queue.remove(r)
                r.first_token, r.generated = self.now, 1
                if r.output <= 1:
                    r.done = self.now
                elif inst.role == "prefill":
                    self.route_handoff(r)
                else:
                    inst.running.append(r)
        self.kick(inst)

    def live(self, recent: list[SimRequest]) -> LiveMetrics:
        pre = [i for i in self.instances if i.role == "prefill" and i.draining_to is None]
        dec = [i for i in self.instances if i.role == "decode" and i.draining_to is None]
        kv = max((sum(r.prompt + r.generated for r in i.running) / self.kv_capacity_tokens for i in dec), default=0.0)
        return LiveMetrics(sum(i.queued_tokens() for i in pre), percentile([r.ttft for r in recent if r.first_token], 0.9),
                           kv, percentile([r.tpot for r in recent if r.done is not None and r.output > 1], 0.9),
                           len(pre), len(dec))

    def roles(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in self.instances:
            out[i.role] = out.get(i.role, 0) + 1
        return out


def simulate(trace: list[SimRequest], curves: StepCurves, roles: list[str], *, max_batch_tokens: int = 2048,
             autoscaler: Autoscaler | None = None, interval_s: float = 10.0, switch_s: float = 5.0,
             window_s: float = 60.0, kv_capacity_tokens: int = 1 << 20, scale_in_out: bool = False) -> SimResult:
    """Run `trace` (sorted by arrival) to completion; see the module docstring."""
    c = Cluster(curves, roles, max_batch_tokens, kv_capacity_tokens)
    for r in trace:
        c.at(r.arrival, "arrive", r)
    end = trace[-1].arrival if trace else 0.0
    if autoscaler is not None:
        c.at(interval_s, "tick", None)
    timeline = [(0.0, c.roles())]
    decisions: list[str] = []
    seconds: dict[str, float] = {}
    last_t, low_streak = 0.0, 0
    finished: deque[SimRequest] = deque()
    while c._events:
        t, _, kind, payload = heapq.heappop(c._events)
        inst: Instance
        for i in c.instances:
            seconds[i.role] = seconds.get(i.role, 0.0) + (t - last_t)
        last_t = c.now = t
        if kind == "arrive":
            c.route_prompt(payload)
        elif kind == "handoff":
            c.route_handoff(payload)
        elif kind == "installed":
            inst, r = payload
            inst.incoming -= 1
            inst.running.append(r)
            c.kick(inst)
        elif kind == "step":
            inst, batch, chunks = payload
            c.step_done(inst, batch, chunks)
            for r in batch:
                if r.done is not None:
                    finished.append(r)
            finish_drains(c, switch_s)
        elif kind == "switch":
            inst, role = payload
            inst.role, inst.draining_to = role, None
            timeline.append((t, c.roles()))
            for other in list(c.instances):
                c.kick(other)
        elif kind == "tick":
            while finished and finished[0].done is not None and finished[0].done < t - window_s:
                finished.popleft()
            assert autoscaler is not None
            m = c.live(list(finished))
            d = autoscaler.observe(m, t)
            if d is not None:
                drain(c, d.from_role, d.to_role, switch_s)
                decisions.append(f"{t:.0f}s {d.from_role}->{d.to_role}: {d.reason}")
            elif scale_in_out:
                low_streak = scale(c, m, autoscaler, low_streak, switch_s, decisions, t)
            if t < end or any(not i.idle() for i in c.instances):
                c.at(t + interval_s, "tick", None)
    return SimResult(trace, timeline, decisions, seconds)


def drain(c: Cluster, from_role: str, to_role: str, switch_s: float) -> bool:
    cands = [i for i in c.instances if i.role == from_role and i.draining_to is None]
    if not cands:
        return False
    inst = min(cands, key=lambda i: (len(i.running) + len(i.queue), i.iid))
    inst.draining_to = to_role
    finish_drains(c, switch_s)
    return True


def finish_drains(c: Cluster, switch_s: float) -> None:
    for i in c.instances:
        if i.draining_to is not None and i.idle() and i.draining_to != "pending":
            role, i.draining_to = i.draining_to, "pending"
            c.at(c.now + switch_s, "switch", (i, role))


def scale(c: Cluster, m: LiveMetrics, a: Autoscaler, low_streak: int, switch_s: float, decisions: list[str],
          t: float) -> int:
    """Release an instance when both pressures are low for a while; bring one back when one is high."""
    pre, dec = pressures(m, a.policy)
    off = [i for i in c.instances if i.role == "off"]
    if max(pre, dec) > 1 and off:
        role = "prefill" if pre >= dec else "decode"
        inst = off[0]
        inst.draining_to = "pending"
        c.at(t + switch_s, "switch", (inst, role))
        decisions.append(f"{t:.0f}s off->{role}: pressure prefill {pre:.2f} decode {dec:.2f}")
        return 0
    if max(pre, dec) < a.policy.low / 2:
        low_streak += 1
        if low_streak >= a.policy.confirm:
            role = "prefill" if pre <= dec and m.prefill_workers > a.policy.min_per_role else "decode"
            if (m.prefill_workers if role == "prefill" else m.decode_workers) > a.policy.min_per_role and drain(c, role, "off", switch_s):
                decisions.append(f"{t:.0f}s {role}->off: pressure prefill {pre:.2f} decode {dec:.2f}")
            return 0
        return low_streak
    return 0
