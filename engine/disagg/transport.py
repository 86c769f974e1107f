"""Where hand-off KV bytes travel: `put` on the prefill side, `take` on the decode side, `discard` on failure.

`ShmTransport` (one machine): one POSIX shared-memory segment per hand-off holding every array back to back;
the handle (`ShmHandle`) is its name and an index, so only a few hundred bytes cross the pipe. The reader
copies the bytes into its KV pool and unlinks the segment; whoever gives up on a hand-off (the router,
when a worker dies or times out) calls `discard`, so no segment outlives its request.
The resource tracker is told to forget each segment: ownership passes from process to process by hand.
Across machines the payload goes through the Ray object store instead (`ray_transport.RayTransport`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import numpy as np
from recipe.engine.disagg.ray_transport import RayTransport
from recipe.engine.disagg.transport_protocol import Transport, TransportError

__all__ = ["ShmHandle", "ShmTransport", "Transport", "TransportError", "make_transport"]


@dataclass(frozen=True)
class ShmHandle:
    name: str
    size: int
    index: tuple[tuple[str, int, tuple[int, ...], str], ...]  # (key, offset, shape, dtype)


def _forget(shm: shared_memory.SharedMemory) -> None:
    with contextlib.suppress(Exception):
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]


def _unlink(shm: shared_memory.SharedMemory) -> None:
    """Remove the segment's name without telling the tracker again (`_forget` already did)."""
    import _posixshmem  # type: ignore[import-not-found]

    with contextlib.suppress(FileNotFoundError):
        _posixshmem.shm_unlink(shm._name)  # type: ignore[attr-defined]


class ShmTransport:
    """A segment per hand-off (see the module docstring)."""

    def put(self, arrays: dict[str, np.ndarray]) -> ShmHandle:
        index = []
        at = 0
        for key, a in arrays.items():
            index.append((key, at, tuple(a.shape), a.dtype.str))
            at += (a.nbytes + 63) // 64 * 64
        shm = shared_memory.SharedMemory(create=True, size=max(at, 1))
        _forget(shm)
        try:
            assert shm.buf is not None
            for (_key, offset, shape, dtype), a in zip(index, arrays.values(), strict=True):
                dst = np.ndarray(shape, dtype=np.dtype(dtype), buffer=shm.buf, offset=offset)
                dst[...] = a
            return ShmHandle(shm.name, at, tuple(index))
        finally:
            shm.close()

    def take(self, handle: object) -> dict[str, np.ndarray]:
        assert isinstance(handle, ShmHandle), handle
        try:
            shm = shared_memory.SharedMemory(name=handle.name)
        except FileNotFoundError:
            raise TransportError(f"hand-off segment {handle.name} is gone") from None
        _forget(shm)
        try:
            assert shm.buf is not None
            out = {key: np.ndarray(shape, dtype=np.dtype(dtype), buffer=shm.buf, offset=offset).copy()
                   for key, offset, shape, dtype in handle.index}
        finally:
            shm.close()
            _unlink(shm)
        return out

    def discard(self, handle: object) -> None:
        if not isinstance(handle, ShmHandle):
            return
        try:
            shm = shared_memory.SharedMemory(name=handle.name)
        except FileNotFoundError:
            return
        _forget(shm)
        shm.close()
        _unlink(shm)


def make_transport(name: str, timeout_s: float = 30.0) -> Transport:
    """`shm` (one machine) or `ray` (the Ray object store; needs a connected Ray driver or actor)."""
    if name == "shm":
        return ShmTransport()
    if name == "ray":
        return RayTransport(timeout_s)
    raise ValueError(f"unknown transport {name!r}")
