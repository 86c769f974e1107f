"""Worker processes as the router sees them: start one, read what it says, notice when it dies, stop it.

Each `WorkerProcess` is a spawned OS process (`worker.serve`) with a duplex pipe. A reader thread hands
every message to `on_message(worker, msg)` and, when the pipe closes (the process exited or was killed),
calls `on_exit(worker)` once. Sends from several threads are serialised by a lock.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import threading
from collections.abc import Callable
from typing import Any

from recipe.cluster import messages as m
from recipe.cluster.worker import WorkerSpec, serve


def _main(spec: WorkerSpec, conn: Any) -> None:
    try:
        serve(spec, conn)
    finally:
        conn.close()


class WorkerProcess:
    def __init__(self, spec: WorkerSpec, on_message: Callable[[WorkerProcess, Any], None],
                 on_exit: Callable[[WorkerProcess], None]) -> None:
        self.spec = spec
        self.role = spec.role
        self.ready: m.Ready | None = None
        self.ready_event = threading.Event()
        self.alive = True
        self.stats: m.Stats | None = None
        self._on_message, self._on_exit = on_message, on_exit
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_main, args=(spec, child), name=f"recipe-{spec.role}-{spec.worker_id}",
                                   daemon=True)
        self.process.start()
        child.close()
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"recipe-router-read-{spec.worker_id}", daemon=True)
        self._reader.start()

    @property
    def worker_id(self) -> int:
        return self.spec.worker_id

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode

    def send(self, msg: Any) -> bool:
        """False when the worker is gone (the caller treats it as dead)."""
        if not self.alive:
            return False
        try:
            with self._send_lock:
                self._conn.send(msg)
            return True
        except (OSError, EOFError, BrokenPipeError):
            return False

    def _read(self) -> None:
        try:
            while True:
                msg = self._conn.recv()
                if isinstance(msg, m.Ready):
                    self.ready = msg
                    self.ready_event.set()
                elif isinstance(msg, m.Stats):
                    self.stats = msg
                self._on_message(self, msg)
        except (EOFError, OSError):
            pass
        finally:
            self.alive = False
            self.ready_event.set()
            self._on_exit(self)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask it to stop, then make sure (terminate, kill) it has; closes the pipe."""
        self.send(m.Stop())
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.alive = False
        with contextlib.suppress(OSError):
            self._conn.close()
