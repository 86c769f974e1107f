"""The expert-parallel driver is an `EngineCore`, so `AsyncLLM` serves it as it serves one process: streams
finish (the driver answers `has_request` from its owner table), an abort ends a running request, and the
streamed tokens equal the single-process engine's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from recipe.engine import LLM, AsyncLLM, SamplingParams
from recipe.engine.core import EngineClient, EngineCore
from recipe.engine.expert_parallel.ep_engine import ExpertParallelEngine

CONFIG = {"num_kv_blocks": 64, "max_num_seqs": 2, "num_threads": 1}
PROMPTS = [[5, 17, 33, 9], [200, 3, 41, 77, 12, 8]]


def test_async_llm_streams_over_the_expert_parallel_engine(v3_8_experts: Path) -> None:
    params = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    want = [list(o.token_ids) for o in LLM(str(v3_8_experts), **CONFIG).generate(PROMPTS, params)]

    async def main() -> tuple[list[list[int]], str | None]:
        engine = AsyncLLM(str(v3_8_experts), **CONFIG, expert_parallel_size=2)
        try:
            assert isinstance(engine.engine, ExpertParallelEngine)
            assert isinstance(engine.engine, EngineCore) and isinstance(engine, EngineClient)

            async def tokens(rid: str, prompt: list[int]) -> list[int]:
                return [t async for o in engine.generate(rid, prompt, params) for t in o.new_token_ids]

            got = await asyncio.gather(*(tokens(f"r{i}", p) for i, p in enumerate(PROMPTS)))
            long = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
            reasons: list[str | None] = []

            async def until_aborted() -> None:
                async for o in engine.generate("long", PROMPTS[0], long):
                    if not reasons:
                        reasons.append(None)
                        await engine.abort("long")
                    if o.finished:
                        reasons.append(o.finish_reason)

            await asyncio.wait_for(until_aborted(), 120)
            return list(got), reasons[-1]
        finally:
            await engine.shutdown()

    got, reason = asyncio.run(main())
    assert got == want
    assert reason == "abort"
