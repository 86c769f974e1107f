"""One request's way through the workers, as the router drives it (one `attempt` per try).

Disaggregated: `Reserve` (decode) -> `Reserved` -> `Prefill` (prefill) -> first-token outputs and
`Prefilled` -> `Install` (decode) -> `Installed` and the remaining outputs. Colocated: `Generate` on a
`both` worker. A worker exit or a non-client failure before any token reached the client raises `_Retry`
(the router runs the request again); after that, `WorkerLostError`. `cleanup` gives back whatever the
request still holds on any worker (reservations, queued work, an untaken payload).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from recipe.cluster import messages as m
from recipe.cluster.request_state import FlowRouter, WorkerLostError, _Request, _Retry, _WorkerExit
from recipe.cluster.routing import block_hashes
from recipe.engine.outputs import RequestOutput
from recipe.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from recipe.cluster.pool import WorkerProcess

NO_WORKER_WAIT_S = 60.0


class RequestFlow:
    def __init__(self, router: FlowRouter, request_id: str, ids: list[int], params: SamplingParams, req: _Request) -> None:
        self.router, self.rid, self.ids, self.params, self.req = router, request_id, ids, params, req
        self.start = time.monotonic()
        self.delivered = 0  # outputs with tokens that reached the caller
        self.finished: set[int] = set()
        self.first_token_at: dict[int, float] = {}
        self.tokens: dict[int, int] = {}
        self.bound: dict[int, WorkerProcess] = {}
        self.queued: dict[int, int] = {}  # prefill worker -> prompt tokens counted against it
        self.payload: Any = None  # a hand-off payload sent but not yet taken in
        self.installed = True

    # ----- bookkeeping ----------------------------------------------------------------------------------
    def bind(self, w: WorkerProcess, queued_tokens: int = 0) -> None:
        r = self.router
        with r._lock:
            self.bound[w.worker_id] = w
            self.req.workers.add(w.worker_id)
            load = r.load_of(w.worker_id)
            load.active_requests += 1
            if queued_tokens:
                load.queued_prompt_tokens += queued_tokens
                self.queued[w.worker_id] = queued_tokens

    def unqueue(self, worker_id: int) -> None:
        n = self.queued.pop(worker_id, 0)
        if n:
            with self.router._lock:
                self.router.load_of(worker_id).queued_prompt_tokens -= n

    def cleanup(self) -> None:
        """Give back everything this request holds on any worker (idempotent)."""
        r = self.router
        done = len(self.finished) == self.params.n
        for wid, w in list(self.bound.items()):
            self.unqueue(wid)
            if not done or not self.installed:
                w.send(m.Abort(self.rid))
            with r._lock:
                r.load_of(wid).active_requests -= 1
                self.req.workers.discard(wid)
        self.bound.clear()
        if self.payload is not None:
            r.transport.discard(self.payload)
            r._pending_handoffs.pop(self.rid, None)
            self.payload = None

    # ----- events ---------------------------------------------------------------------------------------
    async def next(self, timeout: float | None = None) -> tuple[int, Any]:
        if timeout is None:
            return await self.req.queue.get()
        return await asyncio.wait_for(self.req.queue.get(), timeout)

    def failed(self, why: str) -> Exception:
        return _Retry(why) if self.delivered == 0 else WorkerLostError(f"request {self.rid}: {why}")

    def common(self, wid: int, item: Any) -> None:
        """Events every phase treats alike: a worker gone, a refused or failed request."""
        if isinstance(item, _WorkerExit):
            raise self.failed(f"worker {wid} exited")
        if isinstance(item, m.RequestFailed):
            if item.bad_request:
                raise ValueError(item.message)
            raise self.failed(f"worker {wid}: {item.message}")

    def account(self, out: RequestOutput) -> None:
        now = time.monotonic()
        if out.new_token_ids:
            self.delivered += 1
            if out.index not in self.first_token_at:
                self.first_token_at[out.index] = now
                if out.index == 0:
                    self.router.ttft.add(now - self.start)
            self.tokens[out.index] = self.tokens.get(out.index, 0) + len(out.new_token_ids)
        if out.finished:
            self.finished.add(out.index)
            n = self.tokens.get(out.index, 0)
            if n > 1:
                self.router.tpot.add((now - self.first_token_at[out.index]) / (n - 1))

    # ----- attempts -------------------------------------------------------------------------------------
    async def attempt(self) -> Any:
        self.cleanup()
        self.finished.clear()
        r = self.router
        deadline = time.monotonic() + NO_WORKER_WAIT_S
        while True:
            if r.has_role("prefill") and r.has_role("decode"):
                async for out in self.disaggregated():
                    yield out
                return
            if r.has_role("both"):
                async for out in self.colocated():
                    yield out
                return
            if time.monotonic() > deadline:
                raise self.failed("no worker is available")
            await asyncio.sleep(0.05)  # workers restarting or changing role

    async def colocated(self) -> Any:
        w = self.router.choose("both", session=self.params.session_key)
        if w is None:
            raise self.failed("no both-role worker")
        self.bind(w)
        if not w.send(m.Generate(self.rid, self.ids, self.params)):
            raise self.failed(f"worker {w.worker_id} is gone")
        while len(self.finished) < self.params.n:
            wid, item = await self.next()
            self.common(wid, item)
            if isinstance(item, list):
                for out in item:
                    self.account(out)
                    yield out

    async def disaggregated(self) -> Any:
        r = self.router
        d = r.choose("decode")
        if d is None:
            raise self.failed("no decode worker")
        self.bind(d)
        self.installed = False
        if not d.send(m.Reserve(self.rid, self.ids, self.params)):
            raise self.failed(f"worker {d.worker_id} is gone")
        while True:
            wid, item = await self.next()
            self.common(wid, item)
            if isinstance(item, m.Reserved):
                held = item.held_blocks
                break
        p = r.choose("prefill", self.ids)
        if p is None:
            raise self.failed("no prefill worker")
        self.bind(p, queued_tokens=len(self.ids))
        if not p.send(m.Prefill(self.rid, self.ids, self.params, held)):
            raise self.failed(f"worker {p.worker_id} is gone")
        timeout = r.config.handoff_timeout_s
        while len(self.finished) < self.params.n:
            try:
                wid, item = await self.next(timeout if self.payload is not None else None)
            except TimeoutError:
                raise self.failed(f"hand-off to decode worker {d.worker_id} timed out after {timeout}s") from None
            self.common(wid, item)
            if isinstance(item, list):
                if wid == p.worker_id:
                    self.unqueue(wid)
                for out in item:
                    self.account(out)
                    yield out
            elif isinstance(item, m.Prefilled):
                self.unqueue(p.worker_id)
                r.prefix_index.record(p.worker_id, block_hashes(self.ids, r.block_size))
                self.payload = item.handoff.payload
                r._pending_handoffs[self.rid] = self.payload
                self._handoff = item.handoff
                if not d.send(m.Install(item.handoff)):
                    raise self.failed(f"worker {d.worker_id} is gone")
            elif isinstance(item, m.Installed):
                self.payload = None
                self.installed = True
                r._pending_handoffs.pop(self.rid, None)
                r.record_handoff(self._handoff, item)
