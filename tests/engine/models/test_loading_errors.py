"""Checkpoints the engine cannot serve are refused with a message that says why, never a stack trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from recipe.engine.models.gguf_file import read_gguf_file
from recipe.engine.models.gguf_loader import unpermute_rope_rows
from recipe.engine.models.registry import load_model
from recipe.engine.models.weights import CheckpointError
from safetensors.torch import load_file, save_file


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_unknown_name_or_missing_path(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"neither 'smollm2', a \.gguf file nor a checkpoint folder"):
        load_model(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="not found"):
        load_model(tmp_path / "missing.gguf")
    with pytest.raises(CheckpointError, match=r"config\.json"):
        load_model(tmp_path)


def test_unsupported_architecture(tiny_llama_dir: Path, tmp_path: Path) -> None:
    d = _copy(tiny_llama_dir, tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unsupported model_type 'gpt2'"):
        load_model(d)


def test_missing_and_extra_tensors_are_named(tiny_llama_dir: Path, tmp_path: Path) -> None:
    d = _copy(tiny_llama_dir, tmp_path / "m")
    tensors = load_file(d / "model.safetensors")
    tensors["model.layers.0.self_attn.rotary_extra"] = torch.zeros(2)
    save_file(tensors, d / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"not used by the model: model\.layers\.0\.self_attn\.rotary_extra"):
        load_model(d)
    del tensors["model.layers.0.self_attn.rotary_extra"], tensors["model.layers.2.mlp.up_proj.weight"]
    save_file(tensors, d / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"no tensor 'model\.layers\.2\.mlp\.up_proj\.weight'"):
        load_model(d)


def test_wrong_shape_is_named(tiny_llama_dir: Path, tmp_path: Path) -> None:
    d = _copy(tiny_llama_dir, tmp_path / "m")
    tensors = load_file(d / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(65)
    save_file(tensors, d / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"'model.norm.weight' has shape \(65,\), expected \(64,\)"):
        load_model(d)


def test_fp8_deepseek_checkpoint_is_refused(tiny_deepseek_dir: Path, tmp_path: Path) -> None:
    d = _copy(tiny_deepseek_dir, tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="quantized DeepSeek-V3 checkpoints"):
        load_model(d)


def test_not_a_gguf_and_truncated_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + bytes(60))
    with pytest.raises(CheckpointError, match="not a GGUF file"):
        load_model(bad)
    from recipe.engine.models.registry import smollm2_path

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_path().read_bytes()[:200_000])
    with pytest.raises(CheckpointError, match=r"truncated or corrupt|runs past the end"):
        read_gguf_file(cut)


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    """llama.cpp's converter permutes HF rows per head as reshape(h, 2, d/2).swapaxes(1, 2); we undo it."""
    for heads in (1, 3, 9):
        hf = torch.randn(heads * 8, 5)
        gguf = hf.reshape(heads, 2, 4, 5).transpose(1, 2).reshape(heads * 8, 5)
        assert torch.equal(unpermute_rope_rows(gguf, heads), hf)


def test_gguf_tokenizer_kinds_outside_byte_level_bpe_are_refused() -> None:
    from recipe.engine.models.gguf_tokenizer import tokenizer_json_from_gguf

    with pytest.raises(CheckpointError, match="tokenizer model 'llama' is not supported"):
        tokenizer_json_from_gguf({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(CheckpointError, match="pre-tokenizer 'chatglm-bpe' is not supported"):
        tokenizer_json_from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "chatglm-bpe",
                                  "tokenizer.ggml.tokens": ["a"]})
