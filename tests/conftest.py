"""Suite-wide options: which stream modules the tests run (recipe.compiled_stream); and the tiny random
checkpoints the engine and cluster tests load (`llama_checkpoint`, `deepseek_checkpoint`).

The choice applies at the first import of `recipe.stream`, so no conftest may import it at module level
(conftests load before `pytest_configure`); tests/stream/test_compiled_stream.py checks the choice held.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--pure-stream", action="store_true",
                     help="run recipe.stream's pure-Python modules even where the compiled ones are built")


def pytest_configure(config: pytest.Config) -> None:
    from recipe import compiled_stream

    if config.getoption("--pure-stream"):
        compiled_stream.use_compiled(False)
    elif not hasattr(config, "workerinput"):
        # the controller (or the only process) builds them once per change of their sources (~30 s), so
        # the tests run what `recipe serve` runs; xdist workers then load that build
        compiled_stream.build()


def _widen(model: object, seed: int) -> None:
    """A wider weight spread than the default init, so greedy choices are far from ties."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # type: ignore[attr-defined]
            if p.dim() >= 2:
                p.normal_(0, 1.0 if "gate.weight" in name else 0.08)


@pytest.fixture(scope="session")
def llama_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama written by `transformers` (safetensors)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2))
    _widen(model, 7)
    path = tmp_path_factory.mktemp("engine_tiny_llama")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def deepseek_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random DeepSeek-V3 (MLA, grouped top-k MoE, a dense first layer) written by `transformers`."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(8)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8, kv_lora_rank=32,
        q_lora_rank=48, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=4, topk_group=2,
        num_experts_per_tok=2, first_k_dense_replace=1, max_position_embeddings=512, bos_token_id=0,
        eos_token_id=1))
    _widen(model, 8)
    path = tmp_path_factory.mktemp("engine_tiny_deepseek")
    model.save_pretrained(path)
    return path
