"""`LLM(model, expert_parallel_size=N)`: rank processes in lockstep (continuous batching, different batches
per rank, idle ranks entering the collectives) give the single-process engine's greedy tokens; with EPLB on,
placements change while serving and the tokens still do not."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from recipe.engine.llm import LLM
from recipe.engine.sampling_params import SamplingParams


def _prompts(seed: int, count: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 256) for _ in range(rng.randint(3, 20))] for _ in range(count)]


def _tokens(llm: LLM, prompts: list[list[int]], max_tokens: list[int]) -> list[list[int]]:
    params = [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True) for m in max_tokens]
    return [list(o.token_ids) for o in llm.generate(prompts, params)]


def test_expert_parallel_engine_equals_single_process(v3_32_experts: Path) -> None:
    prompts = _prompts(3, 5)
    lengths = [3, 9, 5, 12, 2]  # requests end at different steps: ranks run different batches, then idle
    single = LLM(str(v3_32_experts), num_kv_blocks=64, max_num_seqs=2)
    want = _tokens(single, prompts, lengths)
    single.shutdown()
    llm = LLM(str(v3_32_experts), num_kv_blocks=64, max_num_seqs=2, expert_parallel_size=2,
              eplb_interval_steps=3, eplb_redundant_experts=6)
    pids = [p.pid for p in llm.engine._procs]
    try:
        assert _tokens(llm, prompts, lengths) == want
        m = llm.engine.expert_parallel_metrics()
        assert len(m.rank_tokens) == 2 and all(t > 0 for t in m.rank_tokens)
        assert m.imbalance >= 1.0 and all(s > 0 for s in m.all_to_all_s)
        assert any(max(r) > 1 for r in m.replicas.values())  # EPLB replicated hot experts while serving
        assert llm.engine.stats().output_tokens == sum(lengths)
    finally:
        llm.shutdown()
    for pid in pids:  # every rank process is gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_expert_parallel_engine_serves_deepseek_v4(v4_16_experts: Path) -> None:
    """The same through the engine on DeepSeek-V4 (hash- and score-routed layers, window and compressed KV
    kinds), with EPLB moving experts while serving."""
    rng = random.Random(12)
    prompts = [[rng.randrange(2, 96) for _ in range(rng.randint(3, 20))] for _ in range(5)]
    lengths = [4, 8, 2, 10, 6]
    config = dict(block_size=4, num_kv_blocks=64, max_num_seqs=2, num_threads=1)
    single = LLM(str(v4_16_experts), **config)
    want = _tokens(single, prompts, lengths)
    single.shutdown()
    llm = LLM(str(v4_16_experts), **config, expert_parallel_size=2, eplb_interval_steps=3, eplb_redundant_experts=4)
    try:
        assert _tokens(llm, prompts, lengths) == want
        m = llm.engine.expert_parallel_metrics()
        assert len(m.layer_imbalance) == 4 and all(t > 0 for t in m.rank_tokens)
        assert any(max(r) > 1 for r in m.replicas.values())
    finally:
        llm.shutdown()
