"""The contract of a hand-off transport (`put` / `take` / `discard`) and the error `take` raises; every transport
(`transport.ShmTransport`, `ray_transport.RayTransport`) depends on this, and `transport.make_transport` on them."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class TransportError(RuntimeError):
    """The payload is gone or unreadable (its writer died, or it was discarded after a timeout)."""


class Transport(Protocol):
    def put(self, arrays: dict[str, np.ndarray]) -> object: ...

    def take(self, handle: object) -> dict[str, np.ndarray]: ...

    def discard(self, handle: object) -> None: ...
