"""Building a model of one architecture from its Hugging Face config (on the meta device, then emptied onto
the CPU for the checkpoint to fill), and finishing a loaded one (dtype, device, eval). Shared by the
registry (`registry.load_model`) and the GGUF loader (`gguf_loader.load_gguf`)."""

from __future__ import annotations

from typing import Any, TypeAlias

import torch
from recipe.engine.models.deepseek_v3 import DeepseekV3Config, DeepseekV3ForCausalLM
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from recipe.engine.models.deepseek_v4_config import DeepseekV4Config
from recipe.engine.models.llama import LlamaConfig, LlamaForCausalLM
from recipe.engine.models.weights import CheckpointError, cast_floating
from torch import nn

# Router weights stay fp32 in every dtype, as DeepSeek-V3 checkpoints keep them.
_KEEP_FP32 = ("gate.weight", "e_score_correction_bias", "attn_hc", "ffn_hc", "hc_head", "sinks", "position_bias")

ModelForCausalLM: TypeAlias = LlamaForCausalLM | DeepseekV3ForCausalLM | DeepseekV4ForCausalLM


def finish_model(model: nn.Module, dtype: torch.dtype, device: torch.device | str) -> None:
    cast_floating(model, dtype, _KEEP_FP32)
    model.to(device)
    model.eval()
    model.requires_grad_(False)


def build_model(architecture: str, config: dict[str, Any]) -> ModelForCausalLM:
    if architecture == "deepseek_v4":
        return _build_v4(config)
    try:
        shape = (LlamaConfig.from_hf(config) if architecture in ("llama", "qwen2")
                 else DeepseekV3Config.from_hf(config))
    except CheckpointError:
        raise
    except KeyError as exc:
        raise CheckpointError(f"the {architecture} config lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"the {architecture} config has an invalid value: {exc}") from None
    with torch.device("meta"):
        model: ModelForCausalLM = (
            LlamaForCausalLM(shape) if isinstance(shape, LlamaConfig) else DeepseekV3ForCausalLM(shape)
        )
    # Parameters are all overwritten by the checkpoint; computed buffers are rebuilt off the meta device.
    model.to_empty(device="cpu")
    model.rotary = model.make_rotary()
    return model


def _build_v4(config: dict[str, Any]) -> DeepseekV4ForCausalLM:
    try:
        shape = DeepseekV4Config.from_hf(config)
    except KeyError as exc:
        raise CheckpointError(f"the deepseek_v4 config lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"the deepseek_v4 config has an invalid value: {exc}") from None
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(shape)
    model.to_empty(device="cpu")
    model.rotary = model.make_rotary()
    return model
