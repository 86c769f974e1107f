"""`AsyncLLM`: the engine for an asyncio server, a `core.EngineClient` over any `core.EngineCore` (the colocated
engine, or the expert-parallel driver). The core steps in its own thread; requests stream.

Safe to call from the server's event loop: `generate` and `abort` only enqueue commands and wait on
asyncio queues/futures; the engine thread applies commands between steps and hands outputs back with
`loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from recipe.engine.core import EngineCore, EngineStats
from recipe.engine.expert_parallel.ep_engine import create_engine
from recipe.engine.outputs import RequestOutput
from recipe.engine.sampling_params import SamplingParams

log = logging.getLogger("recipe.engine")


class QueueFullError(RuntimeError):
    """The engine already holds `max_waiting_requests` waiting requests; retry later (HTTP 429/503)."""


class EngineDeadError(RuntimeError):
    """The engine is not running: it failed (the cause is chained) or was shut down. Nothing more will run."""


class _Stream:
    __slots__ = ("detached", "loop", "queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.detached = False  # its consumer left; the request id stays taken until the engine let it go


class AsyncLLM:
    """The engine on its own thread, for asyncio callers.

    A request id is taken from `generate` until the engine has let the request go (it finished, or its
    abort was applied), so a reused id never receives an earlier request's outputs. Once the engine thread
    has ended (failure or shutdown), every open stream ends with `EngineDeadError`, `generate` raises it,
    and `abort` returns at once: nothing waits on a thread that is gone. It asks its core only what
    `EngineCore` offers, so every core serves alike.
    """

    def __init__(self, model: Any = "smollm2", **config: Any) -> None:
        self.engine: EngineCore = create_engine(model, **config)  # expert_parallel_size > 1: rank processes
        self._commands: list[tuple[str, Any]] = []
        self._lock = threading.Lock()  # guards _commands, _streams, _closed, _adds_in_hand and adding requests
        self._wake = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._stopped = False  # shutdown asked
        self._closed = False  # the engine thread has ended: no command will ever be applied again
        self._error: BaseException | None = None
        self._adds_in_hand = 0  # "add" commands taken by the engine thread and not yet added to the engine
        self._thread = threading.Thread(target=self._run, name="recipe-engine", daemon=True)
        self._thread.start()

    @property
    def model_info(self) -> Any:
        return self.engine.model_info

    @property
    def max_model_len(self) -> int:
        """Most tokens (prompt + output) one sequence may hold in this engine."""
        return self.engine.max_model_len

    @property
    def error(self) -> BaseException | None:
        """Why the engine thread failed, or None while it runs (or after a clean shutdown)."""
        return self._error

    @property
    def is_running(self) -> bool:
        """False once the engine failed or was shut down."""
        return not (self._stopped or self._closed or self._error is not None)

    def compute_path(self) -> str:
        return self.engine.compute_path()

    def health_problem(self) -> str | None:
        """None while the engine thread runs; "engine failed" or "engine stopped" once it does not."""
        if self._error is not None:
            return "engine failed"
        return None if self.is_running else "engine stopped"

    def stats(self) -> EngineStats:
        """Running/waiting counts, KV usage, prefix cache queries/hits, tokens in/out (a snapshot)."""
        return self.engine.stats()

    def _dead(self) -> EngineDeadError:
        if self._error is not None:
            return EngineDeadError(f"the engine is not running: engine failure: {self._error!r}")
        return EngineDeadError("the engine is not running: it was shut down")

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams
                       ) -> AsyncIterator[RequestOutput]:
        """Stream a request's output deltas until all its `params.n` choices finish.

        Raises `ValueError` for a bad request or a request id still in use, `QueueFullError` when
        `max_waiting_requests` requests wait already, `EngineDeadError` when the engine is not running
        (also mid-stream, when it fails). Leaving the iteration early (client gone, task cancelled) aborts
        the request.
        """
        ids = self.engine.validate(prompt_ids, params)
        stream = _Stream(asyncio.get_running_loop())
        with self._lock:
            if self._stopped or self._closed or self._error is not None:
                raise self._dead()
            queued = (self.engine.num_waiting_requests() + self._adds_in_hand
                      + sum(1 for c, _ in self._commands if c == "add"))
            if queued >= self.engine.config.scheduler.max_waiting_requests:
                raise QueueFullError(f"{queued} requests are waiting (max_waiting_requests="
                                     f"{self.engine.config.scheduler.max_waiting_requests}); retry later")
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
                if finished < params.n and self._streams.get(request_id) is stream:
                    stream.detached = True  # outputs still on their way are dropped
                    if not self._closed:
                        self._commands.append(("abort", (request_id, None, stream)))
                    else:
                        del self._streams[request_id]
            self._wake.set()

    async def abort(self, request_id: str) -> None:
        """Abort a request; returns once its KV blocks are free (at once if the engine is not running).
        Its stream ends with reason "abort"."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._closed:
                return
            self._commands.append(("abort", (request_id, done, None)))
        self._wake.set()
        await done

    async def shutdown(self) -> None:
        """Stop the engine thread; open streams end with `EngineDeadError`."""
        with self._lock:
            self._stopped = True
        self._wake.set()
        await asyncio.to_thread(self._thread.join)
        self.engine.shutdown()

    # ----- engine thread --------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the engine is broken: fail every open stream, clearly
            log.exception("the engine failed; every open and later request fails")
            self._error = exc
        finally:
            self._close()

    def _loop(self) -> None:
        engine = self.engine
        while not self._stopped:
            with self._lock:
                commands, self._commands = self._commands, []
                self._adds_in_hand = sum(1 for c, _ in commands if c == "add")
            for kind, args in commands:
                if kind == "add":
                    request_id, ids, params = args
                    try:
                        with self._lock:  # so `generate` counts every waiting request exactly once
                            self._adds_in_hand -= 1
                            engine.add_request(request_id, ids, params)
                    except (ValueError, TypeError) as exc:
                        self._deliver([exc], request_id)
                        self._release(request_id)
                else:
                    request_id, done, stream = args
                    # By id (`abort`): only a request the engine holds; by stream: only that stream's request.
                    if (stream is None and engine.has_request(request_id)) or (
                            stream is not None and self._streams.get(request_id) is stream):
                        self._deliver(engine.abort_request(request_id))
                        self._release(request_id, stream)
                    if done is not None:
                        _call_soon(done.get_loop(), _resolve, done)
            if engine.has_unfinished_requests():
                outputs = engine.step()
                self._deliver(outputs)
                for request_id in {out.request_id for out in outputs if out.finished}:
                    if not engine.has_request(request_id):
                        self._release(request_id)
            else:
                self._wake.wait()
                self._wake.clear()

    def _close(self) -> None:
        """The thread is ending: refuse new work, end every open stream, resolve every pending abort."""
        with self._lock:
            self._closed = True
            commands, self._commands = self._commands, []
            streams, self._streams = self._streams, {}
        for stream in streams.values():
            if not stream.detached:
                error = self._dead()
                error.__cause__ = self._error
                _call_soon(stream.loop, _put_all, stream.queue, [error])
        for kind, args in commands:
            if kind == "abort" and args[1] is not None:
                _call_soon(args[1].get_loop(), _resolve, args[1])

    def _release(self, request_id: str, stream: _Stream | None = None) -> None:
        """The engine holds nothing more of this request: its id may be used again."""
        with self._lock:
            if stream is None or self._streams.get(request_id) is stream:
                self._streams.pop(request_id, None)

    def _deliver(self, items: list[Any], request_id: str | None = None) -> None:
        by_stream: dict[str, list[Any]] = {}
        for item in items:
            rid = request_id if request_id is not None else item.request_id
            by_stream.setdefault(rid, []).append(item)
        with self._lock:
            targets = [(self._streams.get(rid), batch) for rid, batch in by_stream.items()]
        for stream, batch in targets:
            if stream is not None and not stream.detached:
                _call_soon(stream.loop, _put_all, stream.queue, batch)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Hand work to a caller's event loop; a loop that has closed (its caller is gone) is skipped."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _put_all(queue: asyncio.Queue[Any], items: list[Any]) -> None:
    for item in items:
        queue.put_nowait(item)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
