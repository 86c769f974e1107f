"""AsyncLLM when things go wrong: engine failure, shutdown races, reused request ids, the waiting limit.

Every wait is bounded (`asyncio.wait_for`), so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from faulty_model import FaultyModel
from recipe.engine import AsyncLLM, EngineDeadError, QueueFullError, RequestOutput, SamplingParams
from tiny_paged_model import TinyInfo, make_prompts

CONFIG = {"dtype": "float64", "num_kv_blocks": 128, "block_size": 4, "num_threads": 1}
LONG = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)
LIMIT = 20.0  # seconds; a hang shows up as a TimeoutError


async def until(condition: Callable[[], bool]) -> None:
    """Poll `condition` until it holds; a TimeoutError after LIMIT seconds."""
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.002)

    await asyncio.wait_for(poll(), LIMIT)


async def collect(engine: AsyncLLM, rid: str, prompt: list[int], params: SamplingParams) -> list[RequestOutput]:
    return [out async for out in engine.generate(rid, prompt, params)]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_model_failure_mid_step_ends_every_stream_and_nothing_hangs(async_scheduling: bool) -> None:
    model = FaultyModel(seed=50)
    prompts = make_prompts(4, 5, 20, seed=50)

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), async_scheduling=async_scheduling, **CONFIG)
        got: dict[str, list[RequestOutput]] = {f"r{i}": [] for i in range(4)}

        async def consume(rid: str, prompt: list[int]) -> None:
            async for out in engine.generate(rid, prompt, LONG):
                got[rid].append(out)

        tasks = [asyncio.create_task(consume(f"r{i}", p)) for i, p in enumerate(prompts)]
        await until(lambda: sum(len(v) for v in got.values()) >= 8)  # requests are in flight, tokens streaming
        model.fail_after = model.forward_calls  # the next step raises
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), LIMIT)
        assert all(isinstance(r, EngineDeadError) and "engine failure" in str(r) for r in results), results
        assert not engine.is_running and engine.error is not None
        await asyncio.wait_for(engine.abort("r0"), LIMIT)  # used to wait forever
        await asyncio.wait_for(engine.abort("never-seen"), LIMIT)
        with pytest.raises(EngineDeadError, match="engine failure"):
            await asyncio.wait_for(collect(engine, "late", prompts[0], LONG), LIMIT)
        await asyncio.wait_for(engine.shutdown(), LIMIT)

    asyncio.run(main())


def test_an_abort_queued_before_a_failure_returns() -> None:
    model = FaultyModel(seed=51)

    async def main() -> None:
        # Synchronous scheduling: the engine thread itself waits on the gated step, so the abort stays queued.
        engine = AsyncLLM((model, TinyInfo()), async_scheduling=False, **CONFIG)
        stream = engine.generate("r", make_prompts(1, 8, 8, seed=51)[0], LONG)
        await anext(stream)
        model.gate.clear()  # the next step waits at the gate ...
        model.entered.clear()
        await asyncio.to_thread(model.entered.wait, LIMIT)
        model.fail_after = 0  # ... and then fails
        abort = asyncio.create_task(engine.abort("r"))  # queued while the step is in flight
        await asyncio.sleep(0.05)
        model.gate.set()
        await asyncio.wait_for(abort, LIMIT)

        async def rest() -> list[RequestOutput]:  # outputs of steps before the failure may come first
            return [out async for out in stream]

        with pytest.raises(EngineDeadError):
            await asyncio.wait_for(rest(), LIMIT)
        await engine.shutdown()

    asyncio.run(main())


def test_a_request_racing_shutdown_is_refused_or_ended_never_left_open() -> None:
    model = FaultyModel(seed=52)

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), **CONFIG)
        real_validate = engine.engine.validate

        def validate_during_shutdown(prompt_ids: list[int], params: SamplingParams) -> list[int]:
            # Shutdown completes (engine thread gone) while `generate` is between its checks.
            threading_run(engine.shutdown())
            return real_validate(prompt_ids, params)

        engine.engine.validate = validate_during_shutdown  # type: ignore[method-assign]
        with pytest.raises(EngineDeadError, match="shut down"):
            await asyncio.wait_for(collect(engine, "r", [1, 2, 3], LONG), LIMIT)

    asyncio.run(main())


def threading_run(coro: object) -> None:
    """Run a coroutine to completion on a fresh event loop in another thread (blocking this one)."""
    import threading

    t = threading.Thread(target=asyncio.run, args=(coro,))
    t.start()
    t.join()


def test_a_reused_request_id_never_receives_the_earlier_request_outputs() -> None:
    model = FaultyModel(seed=53)
    prompt = make_prompts(1, 8, 8, seed=53)[0]
    short = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), **CONFIG)
        first = engine.generate("x", prompt, LONG)
        await anext(first)
        model.gate.clear()  # hold the engine inside a step: the abort below is not applied yet
        model.entered.clear()
        await asyncio.to_thread(model.entered.wait, LIMIT)
        await first.aclose()  # the client left: an abort is queued
        with pytest.raises(ValueError, match="already in use"):
            await collect(engine, "x", prompt, short)  # the old request still holds the id
        model.gate.set()
        for _ in range(1000):  # once the abort is applied the id is free again
            try:
                outs = await asyncio.wait_for(collect(engine, "x", prompt, short), LIMIT)
                break
            except ValueError:
                await asyncio.sleep(0.01)
        assert [o.finish_reason for o in outs if o.finished] == ["length"]
        assert sum(len(o.new_token_ids) for o in outs) == 5
        await engine.shutdown()

    asyncio.run(main())


def test_the_waiting_limit_counts_requests_not_sequences() -> None:
    model = FaultyModel(seed=54)

    async def main() -> None:
        engine = AsyncLLM((model, TinyInfo()), max_waiting_requests=2, max_num_seqs=1, **CONFIG)
        tasks = [asyncio.create_task(collect(engine, "running", [1, 2, 3], LONG))]
        await until(lambda: engine.stats().running >= 1)
        many = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True, n=3)
        tasks.append(asyncio.create_task(collect(engine, "three-choices", [4, 5, 6], many)))
        await until(lambda: engine.stats().waiting >= 3)  # one request, three waiting sequences
        tasks.append(asyncio.create_task(collect(engine, "second", [7, 8], LONG)))  # 2 waiting requests: fits
        await until(lambda: engine.stats().waiting >= 4)
        with pytest.raises(QueueFullError, match="2 requests are waiting"):
            await collect(engine, "third", [9], LONG)
        for rid in ("running", "three-choices", "second"):
            await asyncio.wait_for(engine.abort(rid), LIMIT)
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), LIMIT)
        assert all(isinstance(r, list) and r[-1].finish_reason == "abort" for r in results), results
        await engine.shutdown()

    asyncio.run(main())
