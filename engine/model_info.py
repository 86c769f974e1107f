"""What the engine and the server need to know about a loaded model, independent of its weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Architecture = Literal["llama", "qwen2", "deepseek_v3", "deepseek_v4"]


@dataclass(frozen=True)
class ModelInfo:
    """A loaded model's identity and shape.

    `tokenizer_json` is a complete `tokenizer.json` document (usable by `recipe.tokenizer.Tokenizer`), or ""
    when the checkpoint ships no tokenizer (tiny test checkpoints). `chat_format` names the codec that
    renders prompts for it ("chatml" or "deepseek_v4"). `head_dim` is the attention head size; for MLA
    models `num_kv_heads` is 1 and `head_dim` is the compressed cache row (kv_lora_rank + qk_rope_head_dim).
    """

    name: str
    architecture: Architecture
    vocab_size: int
    context_length: int
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    tokenizer_json: str
    chat_format: str
    dtype: torch.dtype
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
