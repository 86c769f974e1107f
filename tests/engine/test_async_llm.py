"""AsyncLLM: streams equal the offline engine's outputs; abort frees KV at once; clear errors."""

from __future__ import annotations

import asyncio

import pytest
from recipe.engine import LLM, AsyncLLM, QueueFullError, RequestOutput, SamplingParams
from tiny_paged_model import TinyInfo, TinyPagedLM, make_prompts

CONFIG = {"dtype": "float64", "num_kv_blocks": 128, "block_size": 4, "num_threads": 1}


async def collect(engine: AsyncLLM, rid: str, prompt: list[int], params: SamplingParams) -> list[RequestOutput]:
    return [out async for out in engine.generate(rid, prompt, params)]


def test_streams_equal_offline_outputs() -> None:
    model = TinyPagedLM(seed=30)
    prompts = make_prompts(6, 2, 40, seed=30)
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=15, logprobs=2, n=2)
    offline = LLM((model, TinyInfo()), **CONFIG).generate(prompts, params)

    async def main() -> list[list[RequestOutput]]:
        engine = AsyncLLM((model, TinyInfo()), **CONFIG)
        try:
            return await asyncio.gather(*(collect(engine, f"r{i}", p, params) for i, p in enumerate(prompts)))
        finally:
            await engine.shutdown()

    streams = asyncio.run(main())
    for i, deltas in enumerate(streams):
        for index in range(2):
            mine = [d for d in deltas if d.index == index]
            tokens = tuple(t for d in mine for t in d.new_token_ids)
            assert tokens == offline[2 * i + index].new_token_ids
            assert mine[-1].finished and mine[-1].finish_reason == offline[2 * i + index].finish_reason
            assert all(not d.finished for d in mine[:-1])
            assert all(d.prompt_tokens == len(prompts[i]) for d in mine)
            assert all(d.request_id == f"r{i}" for d in mine)
            logprobs = [lp for d in mine if d.new_logprobs for lp in d.new_logprobs]
            assert len(logprobs) == len(tokens)


def test_abort_frees_every_block_at_once() -> None:
    model = TinyPagedLM(seed=31)
    prompts = make_prompts(4, 20, 40, seed=31)
    params = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), **CONFIG)
        bm = engine.engine.block_manager
        got: dict[str, list[RequestOutput]] = {f"r{i}": [] for i in range(4)}

        async def consume(rid: str, prompt: list[int]) -> None:
            async for out in engine.generate(rid, prompt, params):
                got[rid].append(out)

        tasks = [asyncio.create_task(consume(f"r{i}", p)) for i, p in enumerate(prompts)]
        while sum(len(v) for v in got.values()) < 12:
            await asyncio.sleep(0.01)
        assert bm.num_free_blocks < bm.num_blocks
        for i in range(4):
            await engine.abort(f"r{i}")
        assert bm.num_free_blocks == bm.num_blocks  # freed by the time abort returns
        await asyncio.gather(*tasks)
        assert all(v[-1].finished and v[-1].finish_reason == "abort" for v in got.values())
        bm.check_invariants()
        await engine.shutdown()

    asyncio.run(main())


def test_leaving_a_stream_early_aborts_the_request() -> None:
    model = TinyPagedLM(seed=32)
    prompt = make_prompts(1, 30, 30, seed=32)[0]

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), **CONFIG)
        stream = engine.generate("r", prompt, SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
        async for _ in stream:
            break
        await stream.aclose()
        for _ in range(200):
            if not engine.engine.has_unfinished_requests():
                break
            await asyncio.sleep(0.01)
        assert engine.engine.block_manager.num_free_blocks == 128
        await engine.shutdown()

    asyncio.run(main())


def test_bad_requests_and_full_queue_get_clear_errors() -> None:
    model = TinyPagedLM(seed=33)

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), max_waiting_requests=2, max_num_seqs=1, **CONFIG)
        with pytest.raises(ValueError, match="ints in"):
            await collect(engine, "bad", [1, 2, 10_000], SamplingParams())
        with pytest.raises(ValueError, match="empty"):
            await collect(engine, "empty", [], SamplingParams())
        with pytest.raises(ValueError, match="holds at most"):
            await collect(engine, "long", [1] * 600, SamplingParams())
        long = SamplingParams(temperature=0.0, max_tokens=500, ignore_eos=True)
        running = [asyncio.create_task(collect(engine, "q0", [1, 2, 3], long))]
        while engine.stats().running < 1:
            await asyncio.sleep(0.001)
        running += [asyncio.create_task(collect(engine, f"q{i}", [1, 2, 3], long)) for i in (1, 2)]
        while engine.stats().waiting < 2:
            await asyncio.sleep(0.001)
        with pytest.raises(QueueFullError, match="max_waiting_requests"):
            await collect(engine, "one-too-many", [1, 2, 3], long)
        stats = engine.stats()
        assert stats.running == 1 and stats.waiting == 2
        for i in range(3):
            await engine.abort(f"q{i}")
        await asyncio.gather(*running)
        await engine.shutdown()
        with pytest.raises(RuntimeError, match="not running"):
            await collect(engine, "late", [1], SamplingParams())

    asyncio.run(main())


def test_stats_count_tokens_and_prefix_hits() -> None:
    model = TinyPagedLM(seed=34)
    prompt = make_prompts(1, 33, 33, seed=34)[0]

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), **CONFIG)
        params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
        await collect(engine, "a", prompt, params)
        outs = await collect(engine, "b", prompt, params)
        assert outs[0].cached_tokens == 32
        s = engine.stats()
        assert (s.prompt_tokens, s.output_tokens) == (66, 10)
        assert (s.prefix_cache_queries, s.prefix_cache_hits) == (66, 32)
        assert s.running == 0 and s.waiting == 0 and s.kv_usage == 0.0
        await engine.shutdown()

    asyncio.run(main())


def test_timing_is_ordered_arrival_scheduled_first_token() -> None:
    model = TinyPagedLM(seed=35)

    async def main() -> list[RequestOutput]:
        engine = AsyncLLM((model, TinyInfo()), **CONFIG)
        outs = await collect(engine, "t", [1, 2, 3, 4], SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
        await engine.shutdown()
        return outs

    outs = asyncio.run(main())
    t = outs[0].timing
    assert t.scheduled_time is not None and t.first_token_time is not None
    assert t.arrival_time <= t.scheduled_time <= t.first_token_time <= t.token_times[0]
    assert t.queue_time is not None and t.ttft is not None and t.queue_time <= t.ttft
    times = [x for o in outs for x in o.timing.token_times]
    assert times == sorted(times) and len(times) == 6
