"""Intra-op threads per step (`EngineConfig.step_threads`, engine/step_threads.py) change no token: greedy
tokens equal and logprobs close with the policy on and off, on a tiny Llama and a tiny DeepSeek-V4."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from recipe.engine import LLM, SamplingParams
from recipe.engine.config import EngineConfig
from recipe.engine.step_threads import StepThreads, profile_step_threads, thread_counts
from v4_checkpoints import write_v4_checkpoint

PARAMS = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=3)
PROMPTS = [[5, 17, 42, 93, 3, 25, 7], [7, 12], [64, 33, 20, 11, 9, 90, 31, 2, 4, 8, 15, 16, 23, 42, 61], [3]]  # ids < 96


@pytest.fixture(scope="module")
def tiny_v4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_v4_checkpoint(tmp_path_factory.mktemp("tiny_v4_threads"), "mixed")


def _llm(path: Path, **config: Any) -> LLM:
    return LLM(str(path), dtype="float32", block_size=16, num_kv_blocks=128, num_threads=2,
               attention_backend="batched", **config)


def _run(llm: LLM) -> list[Any]:
    try:
        return llm.generate(PROMPTS, PARAMS)
    finally:
        llm.shutdown()


def _assert_same(got: list[Any], ref: list[Any]) -> None:
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in ref]
    for g, r in zip(got, ref, strict=True):
        assert len(g.new_logprobs) == len(r.new_logprobs) == PARAMS.max_tokens
        for (chosen, top), (chosen_ref, top_ref) in zip(g.new_logprobs, r.new_logprobs, strict=True):
            assert chosen == pytest.approx(chosen_ref, abs=1e-4)
            assert [t for t, _ in top] == [t for t, _ in top_ref]
            assert [v for _, v in top] == pytest.approx([v for _, v in top_ref], abs=1e-4)


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_v4_dir"])
def test_decode_on_one_thread_and_prefill_on_two_gives_the_tokens_of_two(fixture: str, request) -> None:
    path = request.getfixturevalue(fixture)
    ref = _run(_llm(path))
    llm = _llm(path)
    llm.engine.runner.step_threads = StepThreads(((1, 1), (4, 1)), 2)  # steps of up to 4 tokens on one thread
    seen: list[int] = []
    forward = llm.engine.runner.model.forward

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(torch.get_num_threads())
        return forward(*args, **kwargs)

    llm.engine.runner.model.forward = spy
    _assert_same(_run(llm), ref)
    assert set(seen) == {1, 2}  # the prefill steps ran on two threads, the decode steps on one


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_v4_dir"])
def test_the_start_up_profile_leaves_no_trace_in_the_tokens(fixture: str, request) -> None:
    path = request.getfixturevalue(fixture)
    ref = _run(_llm(path, step_threads="off"))
    llm = _llm(path, step_threads="auto")
    policy = llm.engine.runner.step_threads
    assert isinstance(policy, StepThreads) and policy.num_threads == 2 and policy.buckets
    assert all(t in (1, 2) for _, t in policy.buckets)
    _assert_same(_run(llm), ref)


def test_the_profile_keeps_to_its_time_budget(tiny_v4_dir: Path) -> None:
    llm = _llm(tiny_v4_dir)
    try:
        runner = llm.engine.runner
        t0 = time.perf_counter()
        policy = llm.engine._executor.submit(lambda: profile_step_threads(  # type: ignore[union-attr]
            runner, num_threads=2, max_seqs=64, max_tokens=1024, budget_s=0.05)).result()
        assert time.perf_counter() - t0 < 1.0
        assert len(policy.buckets) < 6  # stopped before the 1,024-token bucket
        assert llm.engine._executor.submit(torch.get_num_threads).result() == 2  # type: ignore[union-attr]
    finally:
        llm.shutdown()


def test_steps_past_the_last_bucket_run_on_every_thread() -> None:
    policy = StepThreads(((1, 1), (4, 2), (16, 1)), 8)
    assert [policy.threads_for(n) for n in (1, 2, 4, 5, 16, 17, 4096)] == [1, 2, 2, 1, 1, 8, 8]
    assert thread_counts(1) == [1] and thread_counts(2) == [1, 2] and thread_counts(6) == [1, 2, 4, 6]


def test_step_threads_takes_auto_or_off_only() -> None:
    assert EngineConfig.from_kwargs(step_threads="auto").kernels.step_threads == "auto"
    with pytest.raises(ValueError, match="step_threads must be"):
        EngineConfig.from_kwargs(step_threads="2")
