"""One engine worker process: its own engine (scheduler, KV pool, model copy), pinned to its own cores.

`serve(spec, channel)` is the whole life of a worker: build the engine, say `Ready`, then loop: take the
router's messages (between steps), retry reservations that waited for memory, step, and send outputs,
hand-offs and load (`Stats`). A role is a label on the same engine: `prefill` runs requests to their first
token and hands them off, `decode` takes hand-offs in, `both` runs whole requests; `SetRole` re-labels an
idle worker (the router drains it first). The process ends on `Stop` or when the router's end closes.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from recipe.cluster import messages as m
from recipe.cluster.config import ROLES
from recipe.cluster.constraint_wire import ConstraintCache
from recipe.engine.disagg.handoff_descriptor import Handoff
from recipe.engine.disagg.transport import TransportError, make_transport
from recipe.engine.kv_connector.handoff_connector import HandoffConnector
from recipe.engine.llm_engine import LLMEngine

STATS_INTERVAL_S = 0.05


class Channel(Protocol):
    def send(self, msg: Any) -> None: ...

    def recv(self) -> Any: ...

    def poll(self, timeout: float) -> bool: ...


@dataclass(frozen=True)
class WorkerSpec:
    worker_id: int
    role: str
    model: Any
    engine_config: dict[str, Any] = field(default_factory=dict)
    cores: tuple[int, ...] | None = None
    transport: str = "shm"
    transport_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")


def pin(cores: tuple[int, ...] | None) -> None:
    if cores:
        os.sched_setaffinity(0, cores)


def serve(spec: WorkerSpec, channel: Channel) -> None:
    """The worker's main loop (see the module docstring)."""
    pin(spec.cores)
    config = dict(spec.engine_config)
    if spec.cores and "num_threads" not in config:
        config["num_threads"] = len(spec.cores)
    connector = HandoffConnector(make_transport(spec.transport, spec.transport_timeout_s))
    engine = LLMEngine(spec.model, connector=connector, **config)
    if spec.role != "both":
        connector.require_hand_off()
    Worker(spec, engine, connector, channel).run()


class Worker:
    def __init__(self, spec: WorkerSpec, engine: LLMEngine, connector: HandoffConnector, channel: Channel) -> None:
        self.spec, self.engine, self.connector, self.channel = spec, engine, connector, channel
        self.role = spec.role
        self.waiting_reserves: deque[m.Reserve] = deque()
        self.queued_prompt_tokens: dict[str, int] = {}
        self.step_times: list[tuple[int, int, float]] = []
        self.stopped = False
        self._last_stats = 0.0
        self.constraints = ConstraintCache(str(getattr(engine.model_info, "tokenizer_json", "") or ""))

    def run(self) -> None:
        e = self.engine
        self.channel.send(m.Ready(self.spec.worker_id, os.getpid(), self.role, e.model_info, e.max_model_len,
                                  e.block_manager.block_size, self.spec.cores))
        try:
            while not self.stopped:
                busy = e.has_unfinished_requests()
                timeout = 0.0 if busy else (0.01 if self.waiting_reserves else STATS_INTERVAL_S)
                try:
                    while self.channel.poll(timeout) and not self.stopped:
                        self.handle(self.channel.recv())
                        timeout = 0.0
                except (EOFError, OSError):
                    break  # the router is gone
                self.retry_reserves()
                if e.has_unfinished_requests():
                    self.step()
                self.send_stats()
        finally:
            e.shutdown()

    # ----- messages -------------------------------------------------------------------------------------
    def handle(self, msg: Any) -> None:
        e = self.engine
        try:
            if isinstance(msg, (m.Generate, m.Prefill, m.Reserve)):
                msg = dataclasses.replace(msg, params=self.constraints.resolve(msg.params))
            if isinstance(msg, m.Generate):
                e.add_request(msg.request_id, msg.prompt_ids, msg.params)
                self.queued_prompt_tokens[msg.request_id] = len(msg.prompt_ids)
            elif isinstance(msg, m.Prefill):
                self.connector.add_prefill(msg.request_id, msg.prompt_ids, msg.params, msg.skip_blocks)
                self.queued_prompt_tokens[msg.request_id] = len(msg.prompt_ids)
            elif isinstance(msg, m.Reserve):
                self.waiting_reserves.append(msg)
                self.retry_reserves()
            elif isinstance(msg, m.Install):
                self.install(msg.handoff)
            elif isinstance(msg, m.Abort):
                self.abort(msg.request_id)
            elif isinstance(msg, m.SetRole):
                assert not e.has_unfinished_requests() and not self.connector.reserved, \
                    "a worker changes role only when drained"
                assert msg.role == "both" or self.connector.hands_off, "the autoscaler moves only workers that hand off"
                self.role = msg.role
            elif isinstance(msg, m.Stop):
                self.stopped = True
        except (ValueError, TypeError) as exc:  # a ConstraintError is a ValueError
            rid = getattr(msg, "request_id", None) or getattr(getattr(msg, "handoff", None), "request_id", "")
            self.channel.send(m.RequestFailed(str(rid), str(exc), bad_request=True))

    def retry_reserves(self) -> None:
        """Reserve in arrival order; the head waits for memory and holds the rest back (back-pressure)."""
        while self.waiting_reserves:
            msg = self.waiting_reserves[0]
            try:
                held = self.connector.reserve(msg.request_id, msg.prompt_ids, msg.params)
            except (ValueError, TypeError) as exc:
                self.waiting_reserves.popleft()
                self.channel.send(m.RequestFailed(msg.request_id, str(exc), bad_request=True))
                continue
            if held is None:
                return
            self.waiting_reserves.popleft()
            self.channel.send(m.Reserved(msg.request_id, held))

    def install(self, handoff: Handoff) -> None:
        t0 = time.perf_counter()
        try:
            transport = self.connector.transport
            arrays = transport.take(handoff.payload) if transport else {}
        except TransportError as exc:
            self.connector.release(handoff.request_id)
            self.channel.send(m.RequestFailed(handoff.request_id, str(exc)))
            return
        if handoff.request_id not in self.connector.reserved:  # aborted while the payload was on its way
            return
        blocks = self.connector.install(handoff, arrays)
        self.channel.send(m.Installed(handoff.request_id, time.perf_counter() - t0, blocks))

    def abort(self, request_id: str) -> None:
        self.waiting_reserves = deque(r for r in self.waiting_reserves if r.request_id != request_id)
        self.queued_prompt_tokens.pop(request_id, None)
        outputs = self.engine.abort_request(request_id)
        if outputs:
            self.channel.send(m.Outputs(outputs))

    # ----- stepping -------------------------------------------------------------------------------------
    def step(self) -> None:
        e = self.engine
        busy0, steps0 = e.model_busy_s, e.steps
        outputs = e.step()
        if e.steps > steps0:
            self.step_times.append((0, len(e.scheduler.running), e.model_busy_s - busy0))
        for out in outputs:
            self.queued_prompt_tokens.pop(out.request_id, None)
        handoffs = self.connector.build_connector_meta()
        outputs = self.connector.rewrite(outputs)
        if outputs:
            self.channel.send(m.Outputs(outputs))
        for h in handoffs:
            self.channel.send(m.Prefilled(h))

    def send_stats(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_stats < STATS_INTERVAL_S:
            return
        self._last_stats = now
        e = self.engine
        s = e.stats()
        self.channel.send(m.Stats(self.spec.worker_id, self.role, s.running, s.waiting, s.kv_usage,
                                  sum(self.queued_prompt_tokens.values()), s.steps, s.model_busy_s, self.step_times,
                                  s.swa_sessions))
        self.step_times = []
