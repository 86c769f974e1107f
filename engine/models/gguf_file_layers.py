"""A GGUF model's layers built straight over the file's blocks (`load_gguf` with weight_format "gguf" or
"gguf_q8"): each block-quantised weight is read from the file, tensor by tensor, into a `BlockArena` in the
layout the native kernels read (rows of blocks, a fused weight's parts of one format side by side), and nothing
is dequantised but the few small tensors the file stores in F32/F16 (norms, biases). Peak memory is about the
file's size: no fp32 copy of the model, no second copy of the blocks, and the file is read, not mapped, so its
pages are not this process's memory.

It builds what the reference way builds (`load_gguf()`, then `use_file_blocks`), the same layers over the same
bytes, except two things that hold the same values in less memory: the token embedding is a `GGUFEmbedding` over
the file's rows (each lookup dequantised as the fp32 table's row is), and an untied LM head is the head's block
layer itself instead of an fp32 `lm_head` beside it. A weight whose group (q/k/v, gate/up, as the model fuses
them) is not all blocks of the kernels' formats is dequantised to fp32, as the reference keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np
import torch
from gguf.quants import dequantize
from recipe.engine.layers.gguf_embedding import GGUFEmbedding
from recipe.engine.layers.gguf_linear import Part, repacks
from recipe.engine.models.block_arena import BlockArena, read_into
from recipe.engine.models.gguf_file import GGUFTensor
from recipe.engine.models.gguf_weights import head_name, is_block_type, swap_in_file_layers
from recipe.engine.models.llama import LlamaConfig, LlamaForCausalLM
from recipe.engine.models.weights import CheckpointError
from torch import nn

EMBED = "model.embed_tokens.weight"
Reorder = Callable[[torch.Tensor, str], torch.Tensor]  # (rows, HF name) -> rows in HF order


def weight_groups(model: LlamaForCausalLM) -> list[tuple[list[str], nn.Module]]:
    """(HF names, the module holding them) of every weight as the model fuses them, in the order a step reads
    them."""
    groups: list[tuple[list[str], nn.Module]] = [([EMBED], model.embed_tokens)]
    for i, layer in enumerate(model.decoder_layers()):
        p = f"model.layers.{i}."
        a, m = layer.self_attn, layer.mlp
        groups += [([p + f"self_attn.{x}_proj.weight" for x in "qkv"], a.qkv), ([p + "self_attn.o_proj.weight"], a.o_proj),
                   ([p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"], m.gate_up),
                   ([p + "mlp.down_proj.weight"], m.down)]
    if model.lm_head is not None:
        groups.append((["lm_head.weight"], model.lm_head))
    return groups


def materialize_except(model: nn.Module, keep_meta: set[int]) -> None:
    """Give every meta parameter and buffer of `model` uninitialised CPU memory, except the tensors whose id is in
    `keep_meta` (weights that become blocks: never allocated)."""
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for key, t in table.items():
                if t is not None and t.is_meta and id(t) not in keep_meta:
                    new = torch.empty_like(t, device="cpu")
                    table[key] = (nn.Parameter(new, requires_grad=t.requires_grad)  # type: ignore[assignment]
                                  if isinstance(t, nn.Parameter) else new)


class FileBlockReader:
    """The file's block-quantised weights, read on first ask (`parts_of`) into the arena or, for a weight its
    layer repacks anyway (`gguf_linear.repacks`), into a buffer of its own that the repacking lets go."""

    def __init__(self, f: BinaryIO, tensors: dict[str, GGUFTensor], groups: list[list[str]], round_x: bool,
                 reorder: Reorder) -> None:
        self._f, self._tensors, self._reorder = f, tensors, reorder
        self.kept = [g for g in groups if all(n in tensors and is_block_type(tensors[n]) for n in g)]
        self._private = {tuple(g) for g in self.kept
                         if g != [EMBED] and repacks({int(tensors[n].qtype) for n in g}, round_x)}
        size = sum(BlockArena.padded(self._nbytes(g)) for g in self.kept if tuple(g) not in self._private)
        self._arena = BlockArena(size)
        self._read: dict[tuple[str, ...], list[Part]] = {}

    def _nbytes(self, names: list[str]) -> int:
        return sum(self._tensors[n].data.nbytes for n in names)

    def names(self) -> set[str]:
        return {n for g in self.kept for n in g}

    def parts_of(self, names: list[str]) -> list[Part] | None:
        """The group's parts as `GGUFLinear` merges them: all of one format -> one part over the group's rows
        (side by side in memory, so nothing is concatenated); else a part per tensor. None where the group is not
        kept as blocks. Asked again (a tied head and the embedding), the same memory."""
        key = tuple(names)
        if key in self._read:
            return self._read[key]
        if list(names) not in self.kept:
            return None
        total = self._nbytes(names)
        region = (torch.empty(total, dtype=torch.uint8) if key in self._private else self._arena.take(total))
        parts: list[Part] = []
        at = 0
        for n in names:
            t = self._tensors[n]
            rows = region[at : at + t.data.nbytes].view(t.shape[0], -1)
            self._fill(rows, t, n)
            parts.append((int(t.qtype), rows))
            at += t.data.nbytes
        if len({q for q, _ in parts}) == 1:
            parts = [(parts[0][0], region.view(-1, parts[0][1].shape[1]))]
        if key not in self._private:  # a repacked weight's buffer goes once its layer has its copy
            self._read[key] = parts
        return parts

    def _fill(self, rows: torch.Tensor, t: GGUFTensor, name: str) -> None:
        probe = torch.empty(rows.shape, dtype=torch.uint8, device="meta")
        if self._reorder(probe, name) is probe:  # rows in place as stored: straight from the file
            read_into(self._f, t.offset, rows)
            return
        scratch = torch.empty_like(rows)
        read_into(self._f, t.offset, scratch)
        rows.copy_(self._reorder(scratch, name))

    def dense(self, t: GGUFTensor, name: str) -> torch.Tensor:
        """A tensor not kept as blocks, dequantised to fp32 (as the reference loads it)."""
        raw = torch.empty(t.data.nbytes, dtype=torch.uint8)
        read_into(self._f, t.offset, raw)
        try:
            values = np.asarray(dequantize(raw.numpy(), t.qtype), dtype=np.float32).reshape(t.shape)
        except NotImplementedError:
            raise CheckpointError(f"GGUF tensor {t.name!r} uses unsupported type {t.qtype.name}") from None
        return self._reorder(torch.from_numpy(values if values.flags.writeable else values.copy()), name)


def build_file_layers(config: dict[str, Any], f: BinaryIO, tensors: dict[str, GGUFTensor], round_x: bool,
                      dtype: torch.dtype, reorder: Reorder) -> tuple[LlamaForCausalLM, int]:
    """The model of `config` over `tensors` (by HF name, in file `f`): the kept groups become layers over their
    blocks, the rest fp32 weights. Returns it and the number of layers over blocks (linears and head)."""
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig.from_hf(config))
    groups = weight_groups(model)
    reader = FileBlockReader(f, tensors, [names for names, _ in groups], round_x, reorder)
    materialize_except(model, {id(m.weight) for names, m in groups if names in reader.kept})
    model.rotary = model.make_rotary()  # computed buffers, rebuilt off the meta device
    kept = reader.names()
    # meta placeholders for the weights that stay blocks (their modules are swapped right after), so the
    # model's own loading names, shapes and checks every tensor
    model.load_weights({n: torch.empty(t.shape, device="meta") if n in kept else reader.dense(t, n)
                        for n, t in tensors.items()})
    embed = reader.parts_of([EMBED])
    if embed is not None:
        ((qtype, raw),) = embed
        model.embed_tokens = GGUFEmbedding(raw, qtype, model.config.hidden_size, dtype)  # type: ignore[assignment]  # same lookup interface
    count = swap_in_file_layers(model, reader.parts_of, round_x)
    if model.lm_head is not None and reader.parts_of([head_name(model)]) is not None:
        model.lm_head = model.logits_head  # type: ignore[assignment]  # the head's blocks are the untied head (no fp32 copy beside them)
    left = [name for name, p in model.named_parameters() if p.is_meta]
    if left:  # a weight kept as blocks whose module was not swapped
        raise CheckpointError(f"GGUF weights kept as blocks but not used by a block layer: {left[:5]}")
    return model, count


def file_reorder(unpermute: Callable[[torch.Tensor, str, dict[str, Any]], torch.Tensor],
                 config: dict[str, Any]) -> Reorder:
    return lambda w, name: unpermute(w, name, config)
