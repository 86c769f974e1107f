"""`EngineCore` / `EngineClient` (engine/core.py): the colocated engine and the disaggregated worker's engine
are cores, `AsyncLLM` is a client over whichever core it was given, and it asks the core only what the
protocol offers (`has_request`, not a concrete engine's request table)."""

from __future__ import annotations

import asyncio
from typing import Any

from recipe.engine import AsyncLLM, SamplingParams
from recipe.engine.core import EngineClient, EngineCore
from recipe.engine.kv_connector.handoff_connector import HandoffConnector
from recipe.engine.llm_engine import LLMEngine
from tiny_paged_model import TinyInfo, TinyPagedLM, make_prompts

CONFIG = {"dtype": "float64", "num_kv_blocks": 64, "block_size": 4, "num_threads": 1}


def test_the_colocated_and_hand_off_engines_are_engine_cores() -> None:
    for connector in (None, HandoffConnector()):
        engine = LLMEngine((TinyPagedLM(seed=1), TinyInfo()), connector=connector, **CONFIG)
        try:
            assert isinstance(engine, EngineCore), connector
            assert not isinstance(engine, EngineClient), connector  # it steps; it does not stream
        finally:
            engine.shutdown()


def test_has_request_follows_a_request_from_add_to_finish_and_abort() -> None:
    engine = LLMEngine((TinyPagedLM(seed=2), TinyInfo()), **CONFIG)
    try:
        first, second = make_prompts(2, 4, 8, seed=2)
        engine.add_request("a", first, SamplingParams(max_tokens=3, ignore_eos=True))
        engine.add_request("b", second, SamplingParams(max_tokens=50, ignore_eos=True))
        assert engine.has_request("a") and engine.has_request("b") and not engine.has_request("c")
        while engine.has_request("a"):
            engine.step()
        assert engine.has_request("b")
        engine.abort_request("b")
        assert not engine.has_request("b")
    finally:
        engine.shutdown()


class CountingCore:
    """A core that is only an `EngineCore` (no request table), wrapping a real engine and counting calls."""

    def __init__(self, inner: LLMEngine) -> None:
        self.inner = inner
        self.config, self.model_info, self.max_model_len = inner.config, inner.model_info, inner.max_model_len
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        if name not in {"validate", "add_request", "abort_request", "step", "has_unfinished_requests",
                        "has_request", "num_waiting_requests", "stats", "shutdown"}:
            raise AttributeError(name)  # anything past the protocol is a concrete engine's, not the core's
        self.calls[name] = self.calls.get(name, 0) + 1
        return getattr(self.inner, name)


def test_async_llm_is_an_engine_client_that_asks_its_core_only_the_protocol(monkeypatch: Any) -> None:
    import recipe.engine.async_engine as async_engine

    made: list[CountingCore] = []

    def make(model: Any, **config: Any) -> CountingCore:
        made.append(CountingCore(LLMEngine(model, **config)))
        return made[-1]

    monkeypatch.setattr(async_engine, "create_engine", make)
    prompts = make_prompts(3, 4, 10, seed=3)

    async def main() -> list[list[int]]:
        engine = AsyncLLM((TinyPagedLM(seed=3), TinyInfo()), **CONFIG)
        try:
            assert isinstance(engine, EngineClient) and not isinstance(engine, EngineCore)
            assert engine.health_problem() is None

            async def tokens(rid: str, prompt: list[int]) -> list[int]:
                out = [o async for o in engine.generate(rid, prompt, SamplingParams(max_tokens=6, ignore_eos=True))]
                return [t for o in out for t in o.new_token_ids]

            got = await asyncio.gather(*(tokens(f"r{i}", p) for i, p in enumerate(prompts)))
            await engine.abort("r0")  # no longer held: a no-op through `has_request`
            return list(got)
        finally:
            await engine.shutdown()
            assert engine.health_problem() == "engine stopped"

    got = asyncio.run(main())
    assert [len(t) for t in got] == [6, 6, 6]
    assert made[0].calls.get("has_request", 0) >= 1 and made[0].calls.get("step", 0) >= 6
