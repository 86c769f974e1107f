"""KV hand-off through the Ray object store: workers on different nodes share no memory and no filesystem.

`put` stores the payload's numpy arrays in the prefill worker's object store (zero-copy for numpy) and the
handle is the `ObjectRef`; it crosses to the decode worker inside the `Install` message, and `take` fetches
it there (Ray moves the bytes node to node). The prefill worker owns the object: Ray frees it once no
process holds the ref, so `discard` only drops the caller's ref; if the owner died first, `take` fails
with `TransportError` (the router then re-runs or ends the request), and a fetch that exceeds
`timeout_s` fails the same way instead of hanging the decode worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from recipe.engine.disagg.transport_protocol import TransportError


@dataclass(frozen=True)
class RayHandle:
    ref: Any  # ray.ObjectRef of dict[str, np.ndarray]


class RayTransport:
    """See the module docstring."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        import ray

        self._ray = ray
        self.timeout_s = timeout_s

    def put(self, arrays: dict[str, np.ndarray]) -> RayHandle:
        return RayHandle(self._ray.put(arrays))

    def take(self, handle: object) -> dict[str, np.ndarray]:
        assert isinstance(handle, RayHandle), handle
        ray = self._ray
        try:
            got = ray.get(handle.ref, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise TransportError(f"hand-off object not fetched within {self.timeout_s}s") from None
        except ray.exceptions.RayError as exc:  # owner died, object lost, ...
            raise TransportError(f"hand-off object is gone: {type(exc).__name__}") from None
        # the fetched arrays are read-only views of the object store: copy them out (as the shm reader
        # does) so the store may evict the object as soon as this ref goes
        return {key: np.array(a, copy=True) for key, a in got.items()}

    def discard(self, handle: object) -> None:
        """Nothing to do: the object goes when its last ref does (the caller drops its own)."""
