"""A writer thread behind a bounded queue: `submit` never blocks; when the queue is full the item is dropped
and counted, so a slow disk costs cache hits later, never time in the model step."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("recipe.engine.kv_tiers")
_STOP = object()


class WriteBehind(Generic[T]):
    def __init__(self, write: Callable[[T], None], max_items: int, name: str = "recipe-kv-writer") -> None:
        assert max_items >= 1
        self._write = write
        self._queue: queue.Queue[object] = queue.Queue(max_items)
        self.drops = 0
        self.written = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> bool:
        """Queue `item` for writing; False (and counted) when the queue is full."""
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            self.drops += 1
            return False

    def flush(self) -> None:
        """Wait until everything queued so far is written (tests, shutdown)."""
        self._queue.join()

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._write(item)  # type: ignore[arg-type]
                self.written += 1
            except Exception:  # a writer must never die: the tier decides what a failure means
                log.exception("KV write-behind: write failed")
            finally:
                self._queue.task_done()
