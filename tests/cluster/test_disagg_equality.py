"""1 prefill + 1 decode worker (separate processes, KV handed off through shared memory) give exactly the
greedy outputs of one colocated engine: plain, n > 1, stop tokens, constraints, max_tokens=1, prefix hits."""

from __future__ import annotations

from pathlib import Path

import pytest
from disagg_helpers import EvenTokens, prompts_of, reference, run_all
from recipe.cluster.config import DisaggConfig
from recipe.cluster.router import DisaggLLM
from recipe.engine import LLM, SamplingParams

CONFIG = {"dtype": "float32", "num_kv_blocks": 160, "block_size": 4, "num_threads": 1, "max_num_batched_tokens": 64}


@pytest.fixture(scope="module")
def router(llama_checkpoint: Path):  # type: ignore[no-untyped-def]
    r = DisaggLLM(str(llama_checkpoint), DisaggConfig(prefill_workers=1, decode_workers=1, ready_timeout_s=600), **CONFIG)
    yield r
    r._stop_all()
    for w in r._workers.values():
        assert not w.process.is_alive()


@pytest.fixture(scope="module")
def colocated(llama_checkpoint: Path):  # type: ignore[no-untyped-def]
    llm = LLM(str(llama_checkpoint), **CONFIG)
    yield llm
    llm.shutdown()


def test_workers_are_separate_processes_on_disjoint_cores(router: DisaggLLM) -> None:
    import os

    workers = router.workers()
    assert [w["role"] for w in workers] == ["prefill", "decode"]
    assert len({w["pid"] for w in workers}) == 2 and os.getpid() not in {w["pid"] for w in workers}
    if len(os.sched_getaffinity(0)) >= 2:
        a, b = (set(w["cores"]) for w in workers)
        assert a and b and not a & b
        for w in workers:
            assert os.sched_getaffinity(w["pid"]) == set(w["cores"])


def test_greedy_outputs_equal_a_colocated_engine(router: DisaggLLM, colocated: LLM) -> None:
    prompts = [*prompts_of(1, 8), list(range(10, 18)), list(range(20, 24))]  # two prompts of whole blocks
    params = [SamplingParams(temperature=0.0, max_tokens=m, n=n, stop_token_ids=s)
              for m, n, s in [(12, 1, ()), (20, 3, ()), (1, 1, ()), (2, 2, ()), (16, 1, (40, 41, 42)),
                              (9, 2, (7,)), (30, 1, ()), (5, 4, ()), (14, 2, ()), (11, 1, ())]]
    got = run_all(router, prompts, params, prefix="eq")
    assert got == reference(colocated, prompts, params)
    assert router.handoffs, "no hand-off happened"


def test_constrained_outputs_equal_a_colocated_engine(router: DisaggLLM, colocated: LLM) -> None:
    prompts = prompts_of(2, 5)
    params = [SamplingParams(temperature=0.0, max_tokens=12, n=n, constraint=EvenTokens(length))
              for n, length in [(1, 3), (2, 6), (1, 1), (3, 15), (1, 0)]]
    got = run_all(router, prompts, params, prefix="cons")
    want = reference(colocated, prompts, params)
    assert got == want
    assert all(t % 2 == 0 for req in got for toks, _ in req.values() for t in toks)


def test_seeded_sampling_equals_a_colocated_engine(router: DisaggLLM, colocated: LLM) -> None:
    prompts = prompts_of(3, 4)
    params = [SamplingParams(temperature=0.9, top_p=0.9, seed=s, max_tokens=10, n=2) for s in range(4)]
    assert run_all(router, prompts, params, prefix="seed") == reference(colocated, prompts, params)


def test_prefix_hits_skip_blocks_the_decode_side_holds(router: DisaggLLM, colocated: LLM) -> None:
    shared = prompts_of(4, 1, 37, 38)[0]
    prompts = [shared + t for t in prompts_of(5, 3, 1, 6)]
    params = [SamplingParams(temperature=0.0, max_tokens=8)] * 3
    first = run_all(router, prompts[:1], params[:1], prefix="warm")
    before = len(router.handoffs)
    rest = run_all(router, prompts[1:], params[1:], prefix="hit")
    assert first + rest == reference(colocated, prompts, params)
    full_blocks = (len(prompts[1]) + 3) // 4
    sent = [h.blocks for h in router.handoffs[before:]]
    assert sent and max(sent) < full_blocks - 5, f"blocks sent {sent}: the shared prefix was sent again"


def test_a_bad_request_is_refused_as_the_engine_refuses_it(router: DisaggLLM) -> None:
    with pytest.raises(ValueError, match="prompt token ids"):
        run_all(router, [[1, 2, 9999]], [SamplingParams(max_tokens=3)], prefix="bad")
    with pytest.raises(ValueError, match="empty"):
        run_all(router, [[]], [SamplingParams(max_tokens=3)], prefix="bad2")
