"""What every route reads: the configuration, backend, pipeline, metrics and Responses store of one app."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from recipe.server.backend import Backend
from recipe.server.config import ServerConfig
from recipe.server.metrics import ServerMetrics
from recipe.server.pipeline import Pipeline
from recipe.server.storage import ResponseStore
from starlette.requests import Request


@dataclass
class ServerState:
    config: ServerConfig
    backend: Backend
    pipeline: Pipeline
    metrics: ServerMetrics
    store: ResponseStore
    served_names: tuple[str, ...]
    started_at: float = field(default_factory=time.time)
    draining: bool = False


def state_of(request: Request) -> ServerState:
    state: ServerState = request.app.state.recipe
    return state
