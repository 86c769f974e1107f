"""A llama GGUF with llama3 RoPE scaling (DeepSeek-R1-Distill-Llama-8B's kind: `rope_freqs.weight`, Q/K rows in
llama.cpp's order) equals `transformers` LlamaForCausalLM with that scaling, past the original context (16)."""

from __future__ import annotations

from pathlib import Path

import torch
from model_driver import PagedDriver, hf_logits
from qwen2_checkpoints import make_hf_llama3, write_qwen2_gguf
from recipe.engine.models.registry import load_model


def test_rope_freqs_and_permuted_rows_match_transformers(tmp_path: Path) -> None:
    hf = make_hf_llama3(21)
    model, info = load_model(write_qwen2_gguf(hf, tmp_path / "llama3.gguf", pre="llama-bpe"))
    assert info.architecture == "llama" and "freq_factors" in model.config.rope_parameters
    ids = [(i * 37 + 11) % 256 for i in range(48)]
    got = PagedDriver(model, num_seqs=1, max_len=64).step([(0, ids)])
    torch.testing.assert_close(got, hf_logits(hf, ids), atol=1e-4, rtol=0)
