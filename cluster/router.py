"""`DisaggLLM`: a `core.EngineClient` (the `AsyncLLM` face) over worker processes, each stepping its own
`core.EngineCore`, so the server streams through it unchanged.

A request on a disaggregated deployment goes: `Reserve` on the decode worker (it allocates first and
answers how many leading blocks it already holds) -> `Prefill` on the prefill worker (it streams the first
token of every choice and hands the KV off) -> `Install` on the decode worker (it streams the rest). With
only `both` workers a request is a `Generate` on one of them.

Faults: a worker whose process ends is noticed by its pipe closing; each of its requests is re-run
elsewhere if no token of it has reached the client yet, else it ends with `WorkerLostError` (an
`EngineDeadError`: the server sends the API's error event). The worker is restarted. A hand-off the
decode side has not taken in within `handoff_timeout_s` ends the request the same way; nothing waits forever
on a worker that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from recipe.cluster import messages as m
from recipe.cluster.config import DisaggConfig, split_cores
from recipe.cluster.constraint_wire import to_wire
from recipe.cluster.live_metrics import LiveMetrics, Window
from recipe.cluster.pool import WorkerProcess
from recipe.cluster.request_flow import RequestFlow
from recipe.cluster.request_state import WorkerLostError, _Request, _Retry, _WorkerExit
from recipe.cluster.routing import (
    PrefixIndex,
    SessionAffinity,
    WorkerLoad,
    block_hashes,
    pick_colocated,
    pick_decode,
    pick_prefill,
)
from recipe.cluster.worker import WorkerSpec
from recipe.engine.async_engine import EngineDeadError
from recipe.engine.core import EngineStats
from recipe.engine.disagg.handoff_descriptor import Handoff
from recipe.engine.disagg.transport import make_transport
from recipe.engine.outputs import RequestOutput
from recipe.engine.prompt_check import check_prompt
from recipe.engine.sampling_params import SamplingParams

log = logging.getLogger("recipe.disagg")


@dataclass
class HandoffRecord:
    payload_bytes: int
    blocks: int
    capture_s: float
    install_s: float


class DisaggLLM:
    """Worker processes behind one `generate` (see the module docstring)."""

    def __init__(self, model: Any = "smollm2", disagg: DisaggConfig | None = None, **engine_config: Any) -> None:
        self.config = disagg or DisaggConfig()
        self.model = model
        self.engine_config = engine_config
        self.transport = make_transport(self.config.transport, self.config.handoff_timeout_s)
        self._lock = threading.Lock()
        self._requests: dict[str, _Request] = {}
        self._workers: dict[int, WorkerProcess] = {}
        self._loads: dict[int, WorkerLoad] = {}
        self._draining: set[int] = set()
        self._stopping = False
        self._restarts = 0
        self.prefix_index = PrefixIndex()
        self.affinity = SessionAffinity()
        self.ttft = Window()
        self.tpot = Window()
        self.handoffs: list[HandoffRecord] = []  # the last 1000
        self.handoff_count = 0
        self.handoff_bytes = 0
        self._pending_handoffs: dict[str, Any] = {}
        roles = self.config.roles()
        self.placement: Any = None  # RayPlacement when the workers are Ray actors
        if self.config.ray_address is not None:
            from recipe.cluster.ray_workers import RayPlacement

            self.placement = RayPlacement(self.config.ray_address, len(roles), self.config.ray_cpus_per_worker,
                                          model, self.config.ray_ship_model, self.config.ready_timeout_s)
        pin = self.config.pin_cores and self.placement is None
        cores = split_cores(sorted(os.sched_getaffinity(0)), len(roles)) if pin else [None] * len(roles)
        for i, (role, c) in enumerate(zip(roles, cores, strict=True)):
            self._start(WorkerSpec(i, role, model, engine_config, c, self.config.transport,
                                   self.config.handoff_timeout_s))
        deadline = time.monotonic() + self.config.ready_timeout_s
        for w in list(self._workers.values()):
            if not w.ready_event.wait(max(0.0, deadline - time.monotonic())) or w.ready is None:
                self._stop_all()
                raise RuntimeError(f"worker {w.worker_id} ({w.role}) did not start (exit: {w.exitcode})")
        first = next(iter(self._workers.values())).ready
        assert first is not None
        self.model_info = first.model_info
        self.block_size = first.block_size
        self.max_model_len = min(w.ready.max_model_len for w in self._workers.values() if w.ready)

    # ----- workers --------------------------------------------------------------------------------------
    def _start(self, spec: WorkerSpec) -> WorkerProcess:
        if self.placement is not None:
            w: Any = self.placement.spawn(spec, self._on_message, self._on_exit)
        else:
            w = WorkerProcess(spec, self._on_message, self._on_exit)
        with self._lock:
            self._workers[spec.worker_id] = w
            self._loads[spec.worker_id] = WorkerLoad(spec.worker_id, spec.role, available=False)
        return w

    def workers(self) -> list[dict[str, Any]]:
        """Each worker's id, role, pid, cores and state (ready / starting / draining), for /health and tests."""
        with self._lock:
            out = []
            for wid, w in sorted(self._workers.items()):
                state = "draining" if wid in self._draining else ("ready" if w.ready and w.alive else "starting")
                out.append({"id": wid, "role": w.role, "pid": w.pid, "state": state,
                            "cores": list(w.spec.cores or ()), "active_requests": self._loads[wid].active_requests,
                            "node": getattr(w, "node_id", None)})
            return out

    @property
    def restarts(self) -> int:
        return self._restarts

    def _on_message(self, w: WorkerProcess, msg: Any) -> None:
        if isinstance(msg, m.Ready):
            with self._lock:
                load = self._loads[w.worker_id]
                load.available = w.worker_id not in self._draining
            return
        if isinstance(msg, m.Stats):
            with self._lock:
                load = self._loads[w.worker_id]
                load.kv_usage, load.running = msg.kv_usage, msg.running
            return
        if isinstance(msg, m.Outputs):
            by_request: dict[str, list[RequestOutput]] = {}
            for out in msg.outputs:
                by_request.setdefault(out.request_id, []).append(out)
            for rid, outs in by_request.items():
                self._post(rid, w.worker_id, outs)
            return
        target = msg.handoff.request_id if isinstance(msg, m.Prefilled) else getattr(msg, "request_id", None)
        if target is not None and not self._post(str(target), w.worker_id, msg) and isinstance(msg, m.Prefilled):
            self.transport.discard(msg.handoff.payload)  # its request is gone

    def _post(self, rid: str, worker_id: int, item: Any) -> bool:
        with self._lock:
            req = self._requests.get(rid)
        if req is None:
            return False
        with contextlib.suppress(RuntimeError):
            req.loop.call_soon_threadsafe(req.queue.put_nowait, (worker_id, item))
        return True

    def _on_exit(self, w: WorkerProcess) -> None:
        with self._lock:
            stale = self._workers.get(w.worker_id) is not w  # a replacement already runs
            if stale:
                return
            self._loads[w.worker_id].available = False
            targets = [(rid, r) for rid, r in self._requests.items() if w.worker_id in r.workers]
            restart = not self._stopping and self.config.restart_workers
        self.prefix_index.forget(w.worker_id)
        for rid, _ in targets:
            self._post(rid, w.worker_id, _WorkerExit())
        if restart:
            log.warning("worker %d (%s, pid %s) exited with code %s; restarting it", w.worker_id, w.role, w.pid,
                        w.exitcode)
            self._restarts += 1
            threading.Thread(target=self._start, args=(dataclasses.replace(w.spec, role=w.role),), daemon=True).start()

    # ----- the EngineClient face ------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return not self._stopping

    @property
    def error(self) -> BaseException | None:
        return None

    def compute_path(self) -> None:
        """None: each worker's engine runs its own path (its log says which)."""
        return None

    def health_problem(self) -> str | None:
        """None when every worker is ready; else which are not (the router still serves if a path remains),
        or "engine stopped" after `shutdown`."""
        if self._stopping:
            return "engine stopped"
        bad = [f"worker {w['id']} ({w['role']}) {w['state']}" for w in self.workers() if w["state"] != "ready"]
        return "; ".join(bad) or None

    def stats(self) -> EngineStats:
        with self._lock:
            loads = list(self._loads.values())
        stats = [w.stats for w in self._workers.values() if w.stats is not None]
        return EngineStats(
            running=sum(s.running for s in stats), waiting=sum(s.waiting for s in stats),
            kv_usage=max((s.kv_usage for s in stats), default=0.0), num_kv_blocks=0,
            prefix_cache_queries=0, prefix_cache_hits=0, prompt_tokens=0, output_tokens=0,
            steps=sum(s.steps for s in stats), model_busy_s=sum(s.model_busy_s for s in stats),
            swa_sessions=summed([s.swa_sessions for s in stats if s.swa_sessions is not None]),
        ) if loads else EngineStats(0, 0, 0.0, 0, 0, 0, 0, 0, 0, 0.0)

    def live_metrics(self) -> LiveMetrics:
        from recipe.cluster.live_metrics import percentile

        with self._lock:
            loads = [w for w in self._loads.values() if w.available]
        pre = [w for w in loads if w.role == "prefill"]
        dec = [w for w in loads if w.role == "decode"]
        return LiveMetrics(
            prefill_queue_tokens=sum(w.queued_prompt_tokens for w in pre),
            ttft_p90_s=percentile(self.ttft.values(), 0.9),
            decode_kv_usage=max((w.kv_usage for w in dec), default=0.0),
            tpot_p90_s=percentile(self.tpot.values(), 0.9),
            prefill_workers=len(pre), decode_workers=len(dec))

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> list[int]:
        return check_prompt(prompt_ids, params, int(self.model_info.vocab_size), self.max_model_len)

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams
                       ) -> AsyncIterator[RequestOutput]:
        """As `AsyncLLM.generate`; a worker lost mid-stream raises `WorkerLostError`."""
        ids = self.validate(prompt_ids, params)
        if self._stopping:
            raise EngineDeadError("the engine is not running: it was shut down")
        req = _Request(asyncio.get_running_loop())
        with self._lock:
            if request_id in self._requests:
                raise ValueError(f"request id {request_id!r} is already in use")
            self._requests[request_id] = req
        flow = RequestFlow(self, request_id, ids, to_wire(params), req)
        try:
            for attempt in range(3):
                try:
                    async for out in flow.attempt():
                        yield out
                    return
                except _Retry as exc:
                    if attempt == 2:
                        raise WorkerLostError(f"request {request_id} failed on every try: {exc}") from None
                    log.warning("request %s: %s; running it again", request_id, exc)
                    await asyncio.sleep(0.05 * (attempt + 1))
        finally:
            flow.cleanup()
            with self._lock:
                self._requests.pop(request_id, None)

    async def abort(self, request_id: str) -> None:
        with self._lock:
            req = self._requests.get(request_id)
            workers = [self._workers[w] for w in (req.workers if req else ()) if w in self._workers]
        for w in workers:
            w.send(m.Abort(request_id))

    async def shutdown(self) -> None:
        await asyncio.to_thread(self._stop_all)

    def _stop_all(self) -> None:
        with self._lock:
            self._stopping = True
            workers = list(self._workers.values())
        for w in workers:
            w.stop()
        for payload in list(self._pending_handoffs.values()):
            self.transport.discard(payload)
        self._pending_handoffs.clear()
        if self.placement is not None:
            self.placement.close()
            self.placement = None

    # ----- role changes (the autoscaler's only lever) ---------------------------------------------------
    async def move_worker(self, worker_id: int, role: str, poll_s: float = 0.02) -> None:
        """Drain a worker (no new requests; its requests finish), re-label it `role`, let it take requests."""
        with self._lock:
            self._draining.add(worker_id)
            self._loads[worker_id].available = False
        try:
            while True:
                with self._lock:
                    busy = any(worker_id in r.workers for r in self._requests.values())
                if not busy:
                    break
                await asyncio.sleep(poll_s)
            w = self._workers[worker_id]
            w.send(m.SetRole(role))
            with self._lock:
                w.role = role
                w.spec = dataclasses.replace(w.spec, role=role)
                self._loads[worker_id].role = role
        finally:
            with self._lock:
                self._draining.discard(worker_id)
                self._loads[worker_id].available = self._workers[worker_id].alive and self._workers[worker_id].ready is not None

    # ----- choices (used by request_flow) ---------------------------------------------------------------
    def choose(self, role: str, ids: list[int] | None = None, session: str | None = None) -> WorkerProcess | None:
        with self._lock:
            loads = [w for w in self._loads.values() if w.role == role]
            if role == "prefill":
                hashes = block_hashes(ids or [], self.block_size)
                choice = pick_prefill(loads, hashes, self.prefix_index, self.block_size)
            elif role == "both":
                choice = pick_colocated(loads, session, self.affinity)
            else:
                choice = pick_decode(loads)
            return None if choice is None else self._workers[choice.worker_id]

    def record_handoff(self, handoff: Handoff, installed: m.Installed) -> None:
        self.handoff_count += 1
        self.handoff_bytes += handoff.payload_bytes
        self.handoffs.append(HandoffRecord(handoff.payload_bytes, installed.num_blocks, handoff.capture_s,
                                           installed.install_s))
        del self.handoffs[:-1000]

    def has_role(self, role: str) -> bool:
        with self._lock:
            return any(w.role == role and w.available for w in self._loads.values())

    def load_of(self, worker_id: int) -> WorkerLoad:
        return self._loads[worker_id]


def summed(counters: list[Any]) -> Any:
    """Field-by-field sum of the workers' counter dataclasses (None when none reported any)."""
    if not counters:
        return None
    return dataclasses.replace(counters[0], **{f.name: sum(getattr(c, f.name) for c in counters)
                                               for f in dataclasses.fields(counters[0])})
