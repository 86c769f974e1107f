"""The expert-parallel switches: config fields with checks, the `recipe serve` flag, and a clear error (no
process left behind) for a checkpoint without routed experts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from recipe.engine import EngineConfig
from recipe.engine.expert_parallel import ep_engine
from recipe.engine.llm import LLM
from recipe.server.cli_serve import engine_config_from_args

from recipe.cli import build_parser


def test_off_by_default_and_checked() -> None:
    c = EngineConfig.from_kwargs("smollm2")
    assert (c.parallel.expert_parallel_size, c.parallel.eplb_interval_steps, c.parallel.eplb_redundant_experts) == (1, None, 0)
    for bad in ({"expert_parallel_size": 0}, {"eplb_interval_steps": 0}, {"eplb_redundant_experts": -1}):
        with pytest.raises(ValueError):
            EngineConfig.from_kwargs("smollm2", **bad)


def test_serve_flag_reaches_the_engine_config() -> None:
    parser = build_parser()
    assert "expert_parallel_size" not in engine_config_from_args(parser.parse_args(["serve"]))
    kwargs = engine_config_from_args(parser.parse_args(["serve", "--expert-parallel-size", "4"]))
    assert EngineConfig.from_kwargs("m", **kwargs).parallel.expert_parallel_size == 4


def test_dense_checkpoint_is_refused_and_ranks_are_ended(llama_checkpoint: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    real_end = ep_engine.end_processes

    def spy(procs: list) -> None:  # type: ignore[type-arg]
        started.extend(p.pid for p in procs)
        real_end(procs)

    monkeypatch.setattr(ep_engine, "end_processes", spy)
    with pytest.raises(ValueError, match="mixture-of-experts"):
        LLM(str(llama_checkpoint), expert_parallel_size=2, num_kv_blocks=16)
    assert len(started) == 2
    for pid in started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
