"""The KV connector contract: how an engine's requests take their KV blocks from, or give them to, another
engine (the shape of vLLM's `kv_connector/v1/base.py`, per request rather than per layer: a step here runs
every layer at once).

Scheduler half (on the engine's thread, between steps): `get_num_new_matched_tokens` (how many of a new
request's tokens the connector will load, past what the local prefix cache holds), `update_state_after_alloc`
(its blocks are allocated: where loaded KV goes), `request_finished` (a choice ends and its blocks are not yet
freed: does the request go on elsewhere?), `request_aborted`, and `build_connector_meta` (what the saves since
the last call produced for the other side). Worker half: `save_kv` and `load_kv`, the block copies of every
cache kind (`kv_payload.py`).

The engine calls `request_finished` from `_finish` and `request_aborted` from `abort_request`; everything
else is called by whoever drives the connector (a disaggregated worker), which also owns the transport.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

import numpy as np
from recipe.engine.block_manager import BlockManager
from recipe.engine.kv_cache import BlockStore
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.sequence import Sequence


class ConnectorHost(Protocol):
    """What a connector sees of its engine (`LLMEngine`)."""

    block_manager: BlockManager
    kv_blocks: BlockStore | None
    swa_sessions: Any  # window_sessions.WindowSessions, or None
    max_model_len: int
    requests: dict[str, list[Sequence]]

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    arrival_time: float | None = None) -> None: ...

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> list[int]: ...

    def resume(self, request_id: str, seqs: list[Sequence]) -> None: ...


class KVConnector(ABC):
    """One engine's end of a KV connection (see the module docstring)."""

    engine: ConnectorHost

    def bind(self, engine: ConnectorHost) -> None:
        """Called once by the engine at the end of its construction."""
        self.engine = engine

    # ----- scheduler half -------------------------------------------------------------------------------
    @abstractmethod
    def get_num_new_matched_tokens(self, seq: Sequence, num_local_tokens: int) -> int:
        """Tokens of `seq` past its first `num_local_tokens` (held by the local prefix cache) whose KV the
        connector will load instead of the engine computing them."""

    @abstractmethod
    def update_state_after_alloc(self, seqs: list[Sequence], num_local_tokens: int) -> None:
        """`seqs` (one request's choices) hold their blocks now; the first `num_local_tokens` were local."""

    @abstractmethod
    def request_finished(self, seq: Sequence, reason: str) -> bool:
        """A choice ends (`reason`), its blocks not yet freed; True when the request goes on in another engine
        from the KV saved here (its output here is not final)."""

    @abstractmethod
    def request_aborted(self, request_id: str) -> None:
        """Forget the request: drop what is saved or reserved for it."""

    @abstractmethod
    def build_connector_meta(self) -> list[Any]:
        """What the saves since the last call produced for the other side, each once."""

    # ----- worker half ----------------------------------------------------------------------------------
    @abstractmethod
    def save_kv(self, seq: Sequence, skip_tokens: int, num_tokens: int) -> dict[str, np.ndarray]:
        """Copies of `seq`'s blocks of every kind holding KV of tokens [skip_tokens, num_tokens)."""

    @abstractmethod
    def load_kv(self, seq: Sequence, arrays: dict[str, np.ndarray], skip_tokens: int,
                num_tokens: int) -> dict[str, list[int]]:
        """Write saved blocks into `seq`'s allocated blocks; returns, per kind, the table positions released
        because the saving side had released them (window blocks before the window)."""
