"""Tiny random checkpoints written by `transformers` (session fixtures); helpers live in `model_driver.py`,
importable from this folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    cfg = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # a wider weight spread than the default init, so logits differ visibly per token
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    return path




@pytest.fixture(scope="session")
def tiny_deepseek_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Dense first layer, two MoE layers (8 experts in 4 groups, top-2 of the best 2 groups, one shared
    expert), MLA with q_lora_rank and kv_lora_rank, interleaved RoPE."""
    from model_driver import write_tiny_deepseek

    return write_tiny_deepseek(tmp_path_factory.mktemp("tiny_deepseek_v3"), 4321)


@pytest.fixture(scope="session")
def tiny_deepseek_yarn_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The other MLA variants: no q_lora_rank, half-split RoPE, YaRN scaling with mscale_all_dim."""
    from model_driver import write_tiny_deepseek

    return write_tiny_deepseek(
        tmp_path_factory.mktemp("tiny_deepseek_v3_yarn"), 99, q_lora_rank=None, rope_interleave=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 128,
                         "beta_fast": 32, "beta_slow": 1},
    )


@pytest.fixture(scope="session")
def tiny_llama_variant_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The other Llama options: biases on attention and MLP, tied embeddings, llama3 RoPE scaling, MHA."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(77)
    cfg = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=512, attention_bias=True, mlp_bias=True,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=[2, 3],
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.08 if p.dim() == 2 else 0.3)
    path = tmp_path_factory.mktemp("tiny_llama_variant")
    model.save_pretrained(path)
    return path
