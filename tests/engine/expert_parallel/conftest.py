"""Expert-parallel tests: rank programs live in `ep_programs.py` (importable by spawned ranks), tiny
DeepSeek-V3 and DeepSeek-V4 checkpoints are written by `transformers`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
for _dir in (str(_HERE), str(_HERE.parent / "models")):
    if _dir not in sys.path:
        sys.path.insert(0, _dir)


@pytest.fixture(scope="session")
def v3_8_experts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dense first layer, two MoE layers of 8 experts (top-2 of the best 2 of 4 groups), one shared expert."""
    from model_driver import write_tiny_deepseek

    return write_tiny_deepseek(tmp_path_factory.mktemp("ep_v3_8"), 4321)


@pytest.fixture(scope="session")
def v3_32_experts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 routed experts (top-4 of the best 4 of 8 groups) over three MoE layers: more experts than a
    decode step has tokens on any rank."""
    from model_driver import write_tiny_deepseek

    return write_tiny_deepseek(tmp_path_factory.mktemp("ep_v3_32"), 77, n_routed_experts=32, n_group=8, topk_group=4,
                         num_experts_per_tok=4, num_hidden_layers=4)


@pytest.fixture(scope="session")
def v4_mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSeek-V4, four layers: hash-routed (by token id) and score-routed MoE layers interleaved, each with
    its shared expert; 4 routed experts, top-2."""
    from v4_checkpoints import write_v4_checkpoint

    return write_v4_checkpoint(tmp_path_factory.mktemp("ep_v4_mixed"), "mixed", seed=3)


@pytest.fixture(scope="session")
def v4_16_experts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSeek-V4 "mixed" with 16 routed experts, top-4: more experts than a decode step has tokens on any rank."""
    from v4_checkpoints import write_v4_checkpoint

    return write_v4_checkpoint(tmp_path_factory.mktemp("ep_v4_16"), "mixed", seed=8, n_routed_experts=16,
                               num_experts_per_tok=4)
