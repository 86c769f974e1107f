"""Faults and role moves on 1 prefill + 2 decode workers: a worker SIGKILLed mid-stream ends its requests with
an error (or re-runs them when no token was sent yet), never a hang; the worker is restarted and the health
check says so meanwhile; a hand-off the decode side does not take in times out cleanly; a worker moved to
another role is drained first and no request is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from disagg_helpers import collect, prompts_of, reference, run_all
from recipe.cluster import messages as m
from recipe.cluster.config import DisaggConfig
from recipe.cluster.router import DisaggLLM, WorkerLostError
from recipe.engine import LLM, SamplingParams

pytestmark = pytest.mark.slow  # three worker processes and two restarts: about two minutes on 2 busy cores

CONFIG = {"dtype": "float32", "num_kv_blocks": 160, "block_size": 4, "num_threads": 1}
GREEDY = SamplingParams(temperature=0.0, max_tokens=10)


@pytest.fixture(scope="module")
def router(llama_checkpoint: Path):  # type: ignore[no-untyped-def]
    r = DisaggLLM(str(llama_checkpoint), DisaggConfig(1, 2, handoff_timeout_s=3.0, ready_timeout_s=600), **CONFIG)
    yield r
    r._stop_all()
    for w in r._workers.values():
        assert not w.process.is_alive()


@pytest.fixture(scope="module")
def colocated(llama_checkpoint: Path):  # type: ignore[no-untyped-def]
    llm = LLM(str(llama_checkpoint), **CONFIG)
    yield llm
    llm.shutdown()


def pid_of(router: DisaggLLM, role: str) -> int:
    return next(w["pid"] for w in router.workers() if w["role"] == role)


def wait_ready(router: DisaggLLM, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while router.health_problem() is not None:
        assert time.monotonic() < deadline, router.workers()
        time.sleep(0.2)


def test_decode_worker_killed_mid_stream_ends_the_request_with_an_error(router: DisaggLLM, colocated: LLM) -> None:
    victim = pid_of(router, "decode")
    got: list[int] = []

    async def stream() -> None:
        async for out in router.generate("long", list(range(5, 15)), SamplingParams(temperature=0.0, max_tokens=450,
                                                                                     ignore_eos=True)):
            got.extend(out.new_token_ids)
            if len(got) == 4:
                os.kill(victim, signal.SIGKILL)

    with pytest.raises(WorkerLostError):
        asyncio.run(asyncio.wait_for(stream(), 60))
    assert 4 <= len(got) < 450
    assert router.health_problem() is not None and "decode" in router.health_problem()  # type: ignore[operator]
    wait_ready(router)
    assert pid_of(router, "decode") != victim and router.restarts >= 1
    prompts = [[7, 8, 9, 10, 11, 12]]
    assert run_all(router, prompts, [GREEDY], prefix="after-kill") == reference(colocated, prompts, [GREEDY])


def test_prefill_worker_killed_before_any_token_the_request_is_run_again(router: DisaggLLM, colocated: LLM) -> None:
    wait_ready(router)
    victim = pid_of(router, "prefill")
    restarts = router.restarts
    os.kill(victim, signal.SIGKILL)
    prompts = [[30, 31, 32, 33, 34, 35, 36, 37, 38]]
    got = run_all(router, prompts, [GREEDY], prefix="rerun")
    assert got == reference(colocated, prompts, [GREEDY])
    assert router.restarts == restarts + 1 and pid_of(router, "prefill") != victim


def test_a_hand_off_the_decode_side_never_takes_times_out(router: DisaggLLM) -> None:
    wait_ready(router)
    prefill = next(w for w in router._workers.values() if w.role == "prefill")
    stopped: list[int] = []
    forward = prefill._on_message

    def stall_decode(w, msg):  # type: ignore[no-untyped-def]
        if isinstance(msg, m.Prefilled) and msg.handoff.request_id == "stalled":
            for wid in router._requests["stalled"].workers:  # the decode worker this request reserved on
                if router._workers[wid].role == "decode":
                    stopped.append(router._workers[wid].pid)  # type: ignore[arg-type]
                    os.kill(stopped[-1], signal.SIGSTOP)
        forward(w, msg)

    prefill._on_message = stall_decode  # type: ignore[method-assign]
    try:
        t0 = time.monotonic()
        with pytest.raises(WorkerLostError, match="timed out"):
            asyncio.run(asyncio.wait_for(collect(router, "stalled", [40, 41, 42, 43, 44], GREEDY), 30))
        assert time.monotonic() - t0 < 15
    finally:
        prefill._on_message = forward  # type: ignore[method-assign]
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert len(stopped) == 1
    assert not router._pending_handoffs
    out = run_all(router, [[40, 41, 42, 43, 44]], [GREEDY], prefix="after-stall")
    assert len(out[0][0][0]) >= 1


def test_drain_then_switch_loses_no_request(router: DisaggLLM, colocated: LLM) -> None:
    wait_ready(router)
    decoders = [w["id"] for w in router.workers() if w["role"] == "decode"]
    restarts = router.restarts
    prompts = prompts_of(11, 6, 5, 30)
    params = [SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)] * len(prompts)

    async def main():  # type: ignore[no-untyped-def]
        tasks = [asyncio.create_task(collect(router, f"drain{i}", p, sp))
                 for i, (p, sp) in enumerate(zip(prompts, params, strict=True))]
        # a tiny model decodes 200 tokens in well under 0.2 s: move as soon as the requests are bound, and
        # move the decode worker serving the most of them (the router may have sent all to one of the two)
        while not any(router.load_of(d).active_requests for d in decoders):
            await asyncio.sleep(0.002)
        target = max(decoders, key=lambda wid: router.load_of(wid).active_requests)
        busy = router.load_of(target).active_requests
        move = asyncio.create_task(router.move_worker(target, "prefill"))
        await asyncio.sleep(0)
        assert router.load_of(target).available is False  # no new request goes to a draining worker
        results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        await asyncio.wait_for(move, 60)
        return results, busy, target

    results, busy, target = asyncio.run(main())
    assert busy > 0, "the moved worker had no request in flight: the test proves nothing"
    assert results == reference(colocated, prompts, params)
    assert {w["id"]: w["role"] for w in router.workers()} == {0: "prefill", **{d: "decode" for d in decoders},
                                                               target: "prefill"}
    assert router.restarts == restarts  # the worker was idle when re-labelled (it asserts so)
    more = prompts_of(12, 4)
    assert run_all(router, more, [GREEDY] * 4, prefix="moved") == reference(colocated, more, [GREEDY] * 4)
    asyncio.run(router.move_worker(target, "decode"))
    assert [w["role"] for w in router.workers()] == ["prefill", "decode", "decode"]
