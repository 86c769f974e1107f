"""Llama- and Qwen2-architecture GGUF files: metadata to config, tensors renamed to `transformers` names, a llama
file's Q/K rows un-permuted from GGUF's RoPE layout (llama.cpp permutes only llama's; Qwen2 keeps the half-split
order), tokenizer rebuilt. The weights either stay the file's blocks (weight_format "gguf"/"gguf_q8": read into
place, `gguf_file_layers.py`) or, the reference, are dequantized (Q4_1, Q8_0, K-quants, ...) to fp32."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf.quants import dequantize
from recipe.engine.model_info import ModelInfo
from recipe.engine.models.builder import build_model, finish_model
from recipe.engine.models.chat_format import chat_format_of
from recipe.engine.models.gguf_file import GGUFTensor, read_gguf_file
from recipe.engine.models.gguf_file_layers import build_file_layers, file_reorder
from recipe.engine.models.gguf_tokenizer import tokenizer_json_from_gguf
from recipe.engine.models.gguf_weights import FileBlocks, LoadedFileLayers, is_block_type
from recipe.engine.models.llama import LlamaConfig, LlamaForCausalLM
from recipe.engine.models.weights import CheckpointError

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK.fullmatch(gguf_name)
    if m is None or m.group(2) not in _BLOCK_NAMES:
        raise CheckpointError(f"GGUF tensor {gguf_name!r} is not part of the supported llama architecture")
    return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"


def unpermute_rope_rows(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row order: GGUF rotates adjacent pairs (2i, 2i+1) within each head, `transformers`
    rotates (i, i + d/2); per head, GGUF row 2i+j holds HF row j*d/2 + i."""
    rows = w.shape[0]
    d = rows // num_heads
    return w.reshape(num_heads, d // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


ARCHITECTURES = ("llama", "qwen2")


def llama_config_from_gguf(meta: dict[str, Any], has_output: bool) -> dict[str, Any]:
    """A `transformers` config dict (LlamaConfig or Qwen2Config, by `model_type`) for the GGUF's `<arch>.*`
    metadata."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"GGUF architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", None):
        raise CheckpointError(f"GGUF rope scaling {scaling!r} is not supported")

    def need(key: str) -> Any:
        if key not in meta:
            raise CheckpointError(f"GGUF metadata lacks {key!r}")
        return meta[key]

    heads = int(need(f"{arch}.attention.head_count"))
    hidden = int(need(f"{arch}.embedding_length"))
    return {
        "model_type": arch,
        "vocab_size": int(meta.get(f"{arch}.vocab_size") or len(need("tokenizer.ggml.tokens"))),
        "hidden_size": hidden,
        "intermediate_size": int(need(f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(need(f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get(f"{arch}.attention.head_count_kv") or heads),
        "head_dim": int(meta.get(f"{arch}.rope.dimension_count") or hidden // heads),
        "rms_norm_eps": float(need(f"{arch}.attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": int(need(f"{arch}.context_length")),
        "rope_theta": float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "tie_word_embeddings": not has_output,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
    }


def unpermute_if_rope(w: torch.Tensor, hf: str, config: dict[str, Any]) -> torch.Tensor:
    """A llama file's Q/K rows (weights, or biases) back in `transformers`' order; anything else as it is."""
    if config["model_type"] != "llama":
        return w
    if ".self_attn.q_proj." in hf:
        return unpermute_rope_rows(w, config["num_attention_heads"])
    if ".self_attn.k_proj." in hf:
        return unpermute_rope_rows(w, config["num_key_value_heads"])
    return w


def _rope_parameters(t: GGUFTensor, config: dict[str, Any]) -> dict[str, Any]:
    """llama3-style RoPE (R1-Distill-Llama): `rope_freqs.weight` holds per-frequency wavelength factors."""
    factors = np.asarray(dequantize(t.data, t.qtype), dtype=np.float32).reshape(-1)
    return {"rope_type": "default", "rope_theta": config["rope_theta"], "freq_factors": [float(f) for f in factors]}


def read_gguf(path: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """(metadata, transformers-style config dict, fp32 tensors under `transformers` names in HF layout)."""
    meta, config, tensors, _ = read_gguf_with_blocks(path)
    return meta, config, tensors


def read_gguf_with_blocks(path: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor],
                                                     dict[str, FileBlocks]]:
    """`read_gguf` and, by `transformers` name, the block-quantised 2-D tensors as the file stores them."""
    meta, gguf_tensors = read_gguf_file(path)
    blocks: dict[str, FileBlocks] = {}
    config = llama_config_from_gguf(meta, any(t.name == "output.weight" for t in gguf_tensors))
    tensors: dict[str, torch.Tensor] = {}
    for t in gguf_tensors:
        if t.name == "rope_freqs.weight":
            config["rope_parameters"] = _rope_parameters(t, config)
            continue
        name = hf_name(t.name)
        try:
            values = np.asarray(dequantize(t.data, t.qtype), dtype=np.float32).reshape(t.shape)
        except NotImplementedError:
            raise CheckpointError(f"GGUF tensor {t.name!r} uses unsupported type {t.qtype.name}") from None
        w = torch.from_numpy(values if values.flags.writeable else values.copy())
        tensors[name] = unpermute_if_rope(w, name, config)
        if is_block_type(t):
            blocks[name] = FileBlocks(t, partial(unpermute_if_rope, hf=name, config=config))
    return meta, config, tensors, blocks


FILE_BLOCK_FORMATS = ("gguf", "gguf_q8")


def load_gguf(
    path: str | Path, *, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
    weight_format: str = "dtype",
) -> tuple[LlamaForCausalLM, ModelInfo]:
    """Load a llama or qwen2 GGUF as a `LlamaForCausalLM` with weights in `dtype` on `device`, and its
    ModelInfo.

    `weight_format` "gguf" / "gguf_q8" (what the engine passes for its default on a GGUF): the linears, LM head
    and embedding over the file's own blocks, read tensor by tensor into their final place
    (`gguf_file_layers.py`), so memory stays about the file's size. Anything else: the reference, every tensor
    dequantised to fp32 (then `dtype`), with references to the file's blocks kept for a later
    `quantize_weights("gguf")`."""
    if weight_format in FILE_BLOCK_FORMATS:
        meta, config, model = _load_over_file_blocks(path, dtype, round_x=weight_format == "gguf_q8")
    else:
        meta, config, tensors, blocks = read_gguf_with_blocks(path)
        built = build_model(config["model_type"], config)
        assert isinstance(built, LlamaForCausalLM)
        model = built
        model.load_weights(tensors)
        model.gguf_blocks = blocks  # for weight_format "gguf" (gguf_weights.py)
    finish_model(model, dtype, device)
    c: LlamaConfig = model.config
    eos = meta.get("tokenizer.ggml.eos_token_id")
    bos = meta.get("tokenizer.ggml.bos_token_id")
    info = ModelInfo(
        name=str(meta.get("general.name") or Path(path).stem),
        architecture=config["model_type"],
        vocab_size=c.vocab_size,
        context_length=c.max_positions,
        eos_token_ids=() if eos is None else (int(eos),),
        bos_token_id=None if bos is None else int(bos),
        tokenizer_json=tokenizer_json_from_gguf(meta),
        chat_format=chat_format_of(meta.get("tokenizer.chat_template")),
        dtype=dtype,
        num_layers=c.num_layers,
        hidden_size=c.hidden_size,
        num_kv_heads=c.num_kv_heads,
        head_dim=c.head_dim,
    )
    return model, info


def _load_over_file_blocks(path: str | Path, dtype: torch.dtype,
                           round_x: bool) -> tuple[dict[str, Any], dict[str, Any], LlamaForCausalLM]:
    meta, gguf_tensors = read_gguf_file(path)
    config = llama_config_from_gguf(meta, any(t.name == "output.weight" for t in gguf_tensors))
    by_name: dict[str, GGUFTensor] = {}
    for t in gguf_tensors:
        if t.name == "rope_freqs.weight":
            config["rope_parameters"] = _rope_parameters(t, config)
        else:
            by_name[hf_name(t.name)] = t
    with open(path, "rb", buffering=0) as f:
        model, count = build_file_layers(config, f, by_name, round_x, dtype, file_reorder(unpermute_if_rope, config))
    model.gguf_blocks = LoadedFileLayers(round_x, count)
    return meta, config, model
