"""What the router (`router.DisaggLLM`) and a request's flow (`request_flow.RequestFlow`) share: a request's
event queue, the events and errors of a failed attempt, and the part of the router a flow calls (`FlowRouter`),
so the flow depends on this and not on the router."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from recipe.cluster import messages as m
from recipe.cluster.config import DisaggConfig
from recipe.cluster.live_metrics import Window
from recipe.cluster.routing import PrefixIndex, WorkerLoad
from recipe.engine.async_engine import EngineDeadError
from recipe.engine.disagg.handoff_descriptor import Handoff
from recipe.engine.disagg.transport_protocol import Transport

if TYPE_CHECKING:
    from recipe.cluster.pool import WorkerProcess


class WorkerLostError(EngineDeadError):
    """A worker serving this request died (or its hand-off timed out) after tokens reached the client."""


class _Retry(Exception):
    """The attempt failed before any token reached the client: run the request again elsewhere."""


@dataclass
class _Request:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[int, Any]] = field(default_factory=asyncio.Queue)
    workers: set[int] = field(default_factory=set)


class _WorkerExit:
    """Posted to a request when one of its workers' processes ended."""


class FlowRouter(Protocol):
    """The router as a request's flow sees it: worker choice and load, hand-off bookkeeping, latency windows."""

    config: DisaggConfig
    transport: Transport
    prefix_index: PrefixIndex
    block_size: int
    ttft: Window
    tpot: Window
    _lock: threading.Lock
    _pending_handoffs: dict[str, Any]

    def choose(self, role: str, ids: list[int] | None = None, session: str | None = None) -> WorkerProcess | None: ...

    def record_handoff(self, handoff: Handoff, installed: m.Installed) -> None: ...

    def has_role(self, role: str) -> bool: ...

    def load_of(self, worker_id: int) -> WorkerLoad: ...
