"""`weight_format = "gguf"` / "gguf_q8": a GGUF-loaded Llama/Qwen2 model computes with the file's own blocks, with
fp32 activations ("gguf") or activations rounded to Q8_0 blocks as llama.cpp rounds them ("gguf_q8").

Two ways in, the same layers (`swap_in_file_layers`): `load_gguf(weight_format="gguf"/"gguf_q8")`, what the
engine does, builds them while loading, from the blocks read straight from the file (`gguf_loader.py`; no fp32
copy); the reference way, `load_gguf()` then `quantize_weights("gguf")`, keeps beside the dequantised fp32 weights a
reference to each block-quantised 2-D tensor of the file (`FileBlocks`, memory-mapped, not copied), and
`use_file_blocks` swaps every linear whose weights are all such tensors (q/k/v and gate/up fused as the model fuses
them) for a layer over those blocks (`engine/layers/gguf_linear.py`), and gives the LM head the head tensor's
blocks. A weight the file stores in F32/F16/BF16 keeps its fp32 layer: that is the file's own precision too.
The model arguments are `LlamaForCausalLM`s, typed `Any`: the model calls in here, so naming it is an import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from recipe.engine.layers.gguf_blocks import SIZES, row_bytes
from recipe.engine.layers.gguf_linear import Part, file_linear
from recipe.engine.models.gguf_file import GGUFTensor
from recipe.engine.models.weights import CheckpointError
from torch import nn


@dataclass(frozen=True)
class FileBlocks:
    """One block-quantised tensor of the file, rows in HF order once `reorder` (a row permutation) is applied."""

    tensor: GGUFTensor
    reorder: Callable[[torch.Tensor], torch.Tensor] | None = None

    def part(self) -> Part:
        n, k = self.tensor.shape
        qtype = int(self.tensor.qtype)
        raw = torch.from_numpy(np.array(self.tensor.data, dtype=np.uint8).reshape(n, row_bytes(qtype, k)))
        return qtype, (raw if self.reorder is None else self.reorder(raw).contiguous())


def is_block_type(t: GGUFTensor) -> bool:
    return len(t.shape) == 2 and int(t.qtype) in SIZES


@dataclass(frozen=True)
class LoadedFileLayers:
    """`model.gguf_blocks` of a model the loader built over the file's blocks already (`load_gguf` with
    weight_format "gguf"/"gguf_q8"): nothing is left to swap."""

    round_x: bool
    count: int


PartsOf = Callable[[list[str]], "list[Part] | None"]  # HF names -> the blocks of one weight, or None (not blocks)


def swap_in_file_layers(model: Any, parts_of: PartsOf, round_x: bool) -> int:
    """Swap the model's linears whose weights `parts_of` gives as blocks (q/k/v and gate/up fused as the model
    fuses them) for layers over them, and set the LM head over the head tensor's blocks; the count swapped."""

    def swap(owner: nn.Module, attr: str, names: list[str]) -> int:
        parts = parts_of(names)
        if parts is None:
            return 0
        old = getattr(owner, attr)
        setattr(owner, attr, file_linear(parts, old.in_features, old.bias, round_x))
        return 1

    count = 0
    for i, layer in enumerate(model.decoder_layers()):
        p = f"model.layers.{i}."
        a, m = layer.self_attn, layer.mlp
        count += swap(a, "qkv", [p + f"self_attn.{x}_proj.weight" for x in "qkv"])
        count += swap(a, "o_proj", [p + "self_attn.o_proj.weight"])
        count += swap(m, "gate_up", [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"])
        count += swap(m, "down", [p + "mlp.down_proj.weight"])
    head = parts_of([head_name(model)])
    if head is not None:
        model.logits_head = file_linear(head, model.config.hidden_size, None, round_x)
        count += 1
    model._fused = False  # the fused step's descriptors are rebuilt over the new layers
    return count


def head_name(model: Any) -> str:
    return "model.embed_tokens.weight" if model.lm_head is None else "lm_head.weight"


def use_file_blocks(model: Any, round_x: bool = False) -> int:
    """Swap the model's linears (and LM head) for layers over the file's blocks; the count swapped. A model
    loaded over the blocks already (`LoadedFileLayers`) is left as it is: its count, if `round_x` is the one it
    was loaded with."""
    blocks: dict[str, FileBlocks] | LoadedFileLayers | None = getattr(model, "gguf_blocks", None)
    if isinstance(blocks, LoadedFileLayers):
        if blocks.round_x != round_x:
            fmt = "gguf_q8" if blocks.round_x else "gguf"
            raise CheckpointError(f"the model was loaded over the file's blocks for weight_format {fmt!r}; load "
                                  "it again for another format")
        return blocks.count
    if blocks is None:
        raise CheckpointError("weight_format 'gguf' needs a model loaded from a GGUF file (once: the swap lets the "
                              "file's mapping go)")
    found = blocks

    def parts_of(names: list[str]) -> list[Part] | None:
        return [found[n].part() for n in names] if all(n in found for n in names) else None

    count = swap_in_file_layers(model, parts_of, round_x)
    model.gguf_blocks = None  # the layers own copies: the file's mapping (resident pages and all) is let go
    return count
