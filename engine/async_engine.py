"""`AsyncLLM`: the engine for an asyncio server. The engine steps in its own thread; requests stream.

Safe to call from the server's event loop: `generate` and `abort` only enqueue commands and wait on
asyncio queues/futures; the engine thread applies commands between steps and hands outputs back with
`loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from recipe.engine.llm_engine import EngineStats, LLMEngine
from recipe.engine.outputs import RequestOutput
from recipe.engine.sampling_params import SamplingParams


class QueueFullError(RuntimeError):
    """The engine already holds `max_waiting_requests` waiting requests; retry later (HTTP 429/503)."""


class _Stream:
    __slots__ = ("loop", "queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()


class AsyncLLM:
    def __init__(self, model: Any = "smollm2", **config: Any) -> None:
        self.engine = LLMEngine(model, **config)
        self._commands: list[tuple[str, Any]] = []
        self._lock = threading.Lock()  # guards _commands and _streams
        self._wake = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._stopped = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="recipe-engine", daemon=True)
        self._thread.start()

    @property
    def model_info(self) -> Any:
        return self.engine.model_info

    def stats(self) -> EngineStats:
        """Running/waiting counts, KV usage, prefix cache queries/hits, tokens in/out (a snapshot)."""
        return self.engine.stats()

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams
                       ) -> AsyncIterator[RequestOutput]:
        """Stream a request's output deltas until all its `params.n` choices finish.

        Raises `ValueError` for a bad request, `QueueFullError` when the queue is full. Leaving the
        iteration early (client gone, task cancelled) aborts the request.
        """
        if self._stopped or self._error is not None:
            raise RuntimeError(f"the engine is not running{f': {self._error}' if self._error else ''}")
        ids = self.engine.validate(prompt_ids, params)
        stream = _Stream(asyncio.get_running_loop())
        with self._lock:
            queued = len(self.engine.scheduler.waiting) + sum(1 for c, _ in self._commands if c == "add")
            if queued >= self.engine.config.max_waiting_requests:
                raise QueueFullError(f"{queued} requests are waiting (max_waiting_requests="
                                     f"{self.engine.config.max_waiting_requests}); retry later")
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already in use")
            self._streams[request_id] = stream
            self._commands.append(("add", (request_id, ids, params)))
        self._wake.set()
        finished = 0
        try:
            while finished < params.n:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item.finished:
                    finished += 1
                yield item
        finally:
            with self._lock:
                self._streams.pop(request_id, None)
                if finished < params.n:
                    self._commands.append(("abort", (request_id, None)))
            self._wake.set()

    async def abort(self, request_id: str) -> None:
        """Abort a request; returns once its KV blocks are free. Its stream ends with reason "abort"."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._commands.append(("abort", (request_id, done)))
        self._wake.set()
        await done

    async def shutdown(self) -> None:
        """Stop the engine thread; open streams end with a RuntimeError."""
        self._stopped = True
        self._wake.set()
        await asyncio.to_thread(self._thread.join)
        self.engine.shutdown()

    # ----- engine thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        engine = self.engine
        while not self._stopped:
            with self._lock:
                commands, self._commands = self._commands, []
            try:
                for kind, args in commands:
                    if kind == "add":
                        request_id, ids, params = args
                        try:
                            engine.add_request(request_id, ids, params)
                        except (ValueError, TypeError) as exc:
                            self._deliver([exc], request_id)
                    else:
                        request_id, done = args
                        self._deliver(engine.abort_request(request_id))
                        if done is not None:
                            done.get_loop().call_soon_threadsafe(_resolve, done)
                if engine.has_unfinished_requests():
                    self._deliver(engine.step())
                else:
                    self._wake.wait()
                    self._wake.clear()
            except BaseException as exc:  # the engine is broken: fail every open stream, clearly
                self._error = exc
                self._stopped = True
                with self._lock:
                    streams = list(self._streams)
                for request_id in streams:
                    self._deliver([RuntimeError(f"engine failure: {exc!r}")], request_id)
                raise
        with self._lock:
            streams = list(self._streams)
        for request_id in streams:
            self._deliver([RuntimeError("the engine was shut down")], request_id)

    def _deliver(self, items: list[Any], request_id: str | None = None) -> None:
        by_stream: dict[str, list[Any]] = {}
        for item in items:
            rid = request_id if request_id is not None else item.request_id
            by_stream.setdefault(rid, []).append(item)
        with self._lock:
            targets = [(self._streams.get(rid), batch) for rid, batch in by_stream.items()]
        for stream, batch in targets:
            if stream is not None:
                stream.loop.call_soon_threadsafe(_put_all, stream.queue, batch)


def _put_all(queue: asyncio.Queue[Any], items: list[Any]) -> None:
    for item in items:
        queue.put_nowait(item)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
