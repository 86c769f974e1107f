"""A hand-off transport inside one process (two engines side by side, tests): `put` keeps copies of the
arrays under a handle, `take` hands them over once."""

from __future__ import annotations

import itertools

import numpy as np
from recipe.engine.disagg.transport_protocol import TransportError


class MemoryTransport:
    def __init__(self) -> None:
        self._payloads: dict[int, dict[str, np.ndarray]] = {}
        self._ids = itertools.count()

    def put(self, arrays: dict[str, np.ndarray]) -> int:
        handle = next(self._ids)
        self._payloads[handle] = {k: np.array(v, copy=True) for k, v in arrays.items()}
        return handle

    def take(self, handle: object) -> dict[str, np.ndarray]:
        payload = self._payloads.pop(handle, None) if isinstance(handle, int) else None
        if payload is None:
            raise TransportError(f"no payload {handle!r} (taken or discarded)")
        return payload

    def discard(self, handle: object) -> None:
        if isinstance(handle, int):
            self._payloads.pop(handle, None)

    def __len__(self) -> int:
        return len(self._payloads)
