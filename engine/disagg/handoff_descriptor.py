"""What a request leaving prefill carries to decode, beside its KV bytes: per continuing choice its first
token and where its blocks sit in the payload (`SeqHandoff`), and the request's whole hand-off (`Handoff`).

The engine's hand-off connector (`engine/kv_connector/handoff_connector.py`) builds and consumes these; the
cluster's router and workers (`recipe.cluster.messages`) only carry them, so they live on the engine's side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SeqHandoff:
    """One choice's state after prefill: its first token, and where its blocks start in the payload.

    `first_block`: the first block of the choice's block table the payload carries (choice 0 from the
    decode side's `skip_blocks`; a later choice from the blocks it shares with choice 0). `replay_ids`:
    the tokens a fresh constraint matcher must accept to reach the prefill side's state (the first token).
    """

    index: int
    first_token: int
    first_block: int
    num_blocks: int
    replay_ids: tuple[int, ...]


@dataclass(frozen=True)
class Handoff:
    """A request leaving prefill: its continuing choices, the KV payload handle, and prefill's accounting."""

    request_id: str
    seqs: tuple[SeqHandoff, ...]
    ended: tuple[int, ...]  # choices that ended at prefill (their reservation is released)
    payload: Any  # transport handle
    cached_tokens: int
    payload_bytes: int
    capture_s: float  # time the prefill side spent reading the blocks and writing the payload
    skip_blocks: int = 0  # choice 0's leading blocks the decode side already held
