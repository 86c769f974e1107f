"""The disaggregated router is an `EngineClient` (engine/core.py), not an `EngineCore`: its cores are its
workers' engines, and its health says what is wrong."""

from __future__ import annotations

import asyncio
from typing import Any

from recipe.cluster.config import DisaggConfig
from recipe.cluster.router import DisaggLLM
from recipe.engine.core import EngineClient, EngineCore


def test_the_disaggregated_router_is_an_engine_client_whose_health_says_what_is_wrong(llama_checkpoint: Any) -> None:
    router = DisaggLLM(str(llama_checkpoint), DisaggConfig(prefill_workers=1, decode_workers=1, ready_timeout_s=600),
                       dtype="float32", num_kv_blocks=64, block_size=4, num_threads=1)
    try:
        assert isinstance(router, EngineClient) and not isinstance(router, EngineCore)  # its cores are its workers'
        assert router.health_problem() is None and router.is_running  # the constructor waits for every worker
    finally:
        asyncio.run(router.shutdown())
    assert router.health_problem() == "engine stopped" and not router.is_running
