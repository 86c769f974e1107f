"""The fused decode step of the Llama family (`EngineConfig.decode_backend = "fused"`): a decode-only step runs
every decoder layer and the final norm in one native call (`llama_decode` in `llama_decode.c`), so Python issues a
handful of calls per step instead of a dozen torch ops per layer. A step of at most MAX_SHARED_ROWS tokens where a
sequence brings several (a speculative verify step's k+1 positions, a short prefill) runs the same way, one row
per token attending up to itself: each token's values are then bit for bit those of decoding it alone, so
speculation on the fused step emits exactly what decoding emits, logprobs included. SmolLM2 fp32, batch 1, context
600 (`python bench/speculative.py --only verify-step`): a decode step 35-54 ms fused against 94-135 ms layered;
each further position ~6-9 ms fused (the products are compute-bound past one row: a pure multiply-add loop runs
~18 GMAC/s on this machine's two cores), 8 positions 88-134 ms against 258-310 ms layered.

An fp32 LM head (the tied embedding table or `lm_head`) runs through the same kernel's product
(`FusedLlamaDecoder.logits`): torch's one-row product reads it at a third of the memory bandwidth.

It computes what the layered path computes with `attention_backend="native"` and `norm_backend="native"`, in the
same order: the q8_0/q4_1 products, RMSNorm, RoPE, the KV write and the attention are the same kernels (or the
same element-wise operations) on the same values; SiLU uses the C library's `expf` where torch uses its own
vectorised exp, and fp32 products sum in another order than torch's matmul, so logits agree to rounding, not bit
for bit (tests/engine/models/test_fused_decode.py states the tolerances). Each row is computed alone, so a
row's result does not depend on the rest of the batch.

`FusedLlamaDecoder.build(model)` is None where the fused step does not apply: no native library, weights,
norms or KV cache not fp32, a linear in another format (int8/int4 on torch's kernels; a GGUF linear with rounded
activations: the fused step reads a GGUF file's blocks with fp32 activations, as `GGUFLinear` computes them, same
values, a fused q/k/v or gate/up in up to MAX_PARTS parts of different formats), or a layout it does not
read (non-contiguous tensors, odd head_dim). The caller then keeps the layered path.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
from recipe.engine.context import AttentionContext
from recipe.engine.kernels.native import library
from recipe.engine.layers.block_quant_linear import Q4_1Linear, Q8_0Linear
from recipe.engine.layers.gguf_embedding import GGUFEmbedding
from recipe.engine.layers.gguf_linear import GGUFLinear
from torch import nn

_I64, _F32, _PTR = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
MAX_SHARED_ROWS = 64  # steps with several tokens of a sequence (verify steps, short prefills) up to this size:
# SmolLM2 fp32 at context 600, fused vs layered (ms): 32 tokens 494 vs 686, 48 715 vs 851, 64 986 vs 993, 128 1638 vs 1781


MAX_PARTS = 3  # llama_decode.c's: a fused q/k/v of three formats at most


class _GGUFPart(ctypes.Structure):
    _fields_ = [("end", _I64), ("qtype", _I64), ("w", _PTR)]


class _Linear(ctypes.Structure):
    _fields_ = [("fmt", _I64), ("n", _I64), ("k", _I64), ("w", _PTR), ("d", _PTR), ("m", _PTR), ("bias", _PTR),
                ("parts", _I64), ("part", _GGUFPart * MAX_PARTS)]


class _Layer(ctypes.Structure):
    _fields_ = [("ln1", _PTR), ("ln2", _PTR), ("qkv", _Linear), ("o", _Linear), ("gate_up", _Linear),
                ("down", _Linear), ("k", _PTR), ("v", _PTR)]


class _Model(ctypes.Structure):
    _fields_ = [("num_layers", _I64), ("hidden", _I64), ("heads", _I64), ("kv_heads", _I64), ("head_dim", _I64),
                ("inter", _I64), ("block_size", _I64), ("eps", _F32), ("scale", _F32),
                ("layers", ctypes.POINTER(_Layer)), ("final_norm", _PTR)]


def _fp32(t: torch.Tensor | None) -> bool:
    return t is not None and t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous()


def _embeds_fp32(module: nn.Module) -> bool:
    """Whether the embedding gives fp32 rows (a GGUF embedding dequantises its file's rows: no table to check)."""
    if isinstance(module, GGUFEmbedding):
        return module.dtype == torch.float32
    weight = module.weight
    return isinstance(weight, torch.Tensor) and _fp32(weight)


def _linear(module: nn.Module) -> _Linear | None:
    """The kernel's view of one linear (its tensors stay owned by the module), or None if it cannot read it."""
    bias = getattr(module, "bias", None)
    if bias is not None and not _fp32(bias):
        return None
    b = None if bias is None else bias.data_ptr()
    if isinstance(module, Q8_0Linear):
        return _Linear(1, module.out_features, module.in_features, module.qweight.data_ptr(), module.d.data_ptr(),
                       None, b)
    if isinstance(module, Q4_1Linear):
        return _Linear(2, module.out_features, module.in_features, module.packed.data_ptr(), module.d.data_ptr(),
                       module.m.data_ptr(), b)
    if isinstance(module, GGUFLinear) and not module.round_x:
        return _gguf_linear(module, b)
    if isinstance(module, nn.Linear) and _fp32(module.weight):  # FewRowsLinear too (same weight)
        return _Linear(0, module.out_features, module.in_features, module.weight.data_ptr(), None, None, b)
    return None


def _gguf_linear(module: GGUFLinear, bias: int | None) -> _Linear | None:
    """A GGUF linear's parts (each but the last a whole number of the kernel's groups of 4 rows), or None."""
    parts = module.raw_parts()
    if len(parts) > MAX_PARTS or any(n % 4 for n in module.rows[:-1]):
        return None
    descs, end = [], 0
    for (qtype, raw), n in zip(parts, module.rows, strict=True):
        end += n
        descs.append(_GGUFPart(end, qtype, raw.data_ptr()))
    return _Linear(3, module.out_features, module.in_features, None, None, None, bias, len(descs),
                   (_GGUFPart * MAX_PARTS)(*descs))


class FusedLlamaDecoder:
    """The native descriptors of one Llama model bound to its KV cache; call it on a decode-only step."""

    def __init__(self, model: _Model, layers: Any, lib: ctypes.CDLL, hidden: int, head: _Linear | None) -> None:
        self._model, self._layers, self._lib, self.hidden, self._head = model, layers, lib, hidden, head

    def applies(self, ctx: AttentionContext) -> bool:
        """Whether the step runs fused: a decode batch, or at most MAX_SHARED_ROWS new tokens in all."""
        return ctx.is_decode_only or len(ctx.slot_mapping) <= MAX_SHARED_ROWS

    @property
    def has_head(self) -> bool:
        """Whether `logits` applies: the model's LM head is a contiguous fp32 matrix (not a quantised head)."""
        return self._head is not None

    @classmethod
    def build(cls, model: Any) -> FusedLlamaDecoder | None:
        """Descriptors for `model` (a `LlamaForCausalLM` with a bound KV cache), or None where it does not apply."""
        lib = library()
        c = model.config
        if lib is None or c.head_dim % 2 or model.rotary.interleaved or not _embeds_fp32(model.embed_tokens):
            return None
        if not _fp32(model.norm.weight) or model.norm.eps != c.rms_norm_eps:
            return None
        layers = model.decoder_layers()
        if len(layers) != len(model.layers) or not layers:
            return None
        descs = []
        for layer in layers:
            a, mlp = layer.self_attn, layer.mlp
            attn = a.attn
            norms = (layer.input_layernorm, layer.post_attention_layernorm)
            linears = [_linear(m) for m in (a.qkv, a.o_proj, mlp.gate_up, mlp.down)]
            if (any(lin is None for lin in linears) or attn.k_cache is None or attn.v_cache is None
                    or not all(_fp32(n.weight) and n.eps == c.rms_norm_eps for n in norms)
                    or not (_fp32(attn.k_cache) and _fp32(attn.v_cache)) or attn.scale != c.head_dim**-0.5):
                return None
            descs.append(_Layer(norms[0].weight.data_ptr(), norms[1].weight.data_ptr(), *linears,
                                attn.k_cache.data_ptr(), attn.v_cache.data_ptr()))
        array = (_Layer * len(descs))(*descs)
        block_size = layers[0].self_attn.attn.k_cache.shape[1]
        desc = _Model(len(descs), c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size,
                      block_size, c.rms_norm_eps, c.head_dim**-0.5, array, model.norm.weight.data_ptr())
        head = None
        if model.logits_head is None and _fp32(weight := model.head_weight):  # a block head has no fp32 matrix
            head = _Linear(0, weight.shape[0], weight.shape[1], weight.data_ptr(), None, None, None)
        return cls(desc, array, lib, c.hidden_size, head)

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                 ctx: AttentionContext) -> torch.Tensor:
        """x [N, hidden] (the step's embeddings; consumed), cos/sin [N, 1, head_dim / 2], positions [N] -> final
        hidden [N, hidden] (after the final norm); ctx's block size must be the cache's. Every row is one token
        attending to its sequence's context up to itself (positions + 1 tokens): a decode batch has one row per
        sequence; a sequence with several new tokens (a verify step's k+1 positions, a short prefill) one row per
        token, so a token's values are computed as they are when it is decoded alone."""
        b = x.shape[0]
        assert ctx.block_size == self._model.block_size and ctx.slot_mapping.shape[0] == b
        x = x.contiguous()
        cos, sin = cos.reshape(b, -1).contiguous(), sin.reshape(b, -1).contiguous()
        shared = not ctx.is_decode_only
        tables = ctx.block_tables
        if shared:  # a row per token: its sequence's block table
            tables = tables.repeat_interleave(torch.tensor(ctx.query_lens), dim=0)
        tables, lens, slots = tables.contiguous(), (positions.to(torch.int64) + 1).contiguous(), ctx.slot_mapping.contiguous()
        out = torch.empty_like(x)
        status = self._lib.llama_decode(ctypes.addressof(self._model), b, x.data_ptr(), cos.data_ptr(), sin.data_ptr(),
                                        slots.data_ptr(), tables.data_ptr(), tables.shape[1], lens.data_ptr(),
                                        int(shared), out.data_ptr())
        if status != 0:
            raise MemoryError("fused decode step: the native kernel could not allocate its scratch memory")
        return out

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [M, hidden] fp32 -> logits [M, vocab]: the LM head's product as the fused step computes its
        fp32 linears (each row alone, the same operations whatever M is). Only where `has_head`."""
        assert self._head is not None
        x = hidden.contiguous()
        out = torch.empty(x.shape[0], self._head.n, dtype=torch.float32)
        if self._lib.fused_linear(ctypes.byref(self._head), x.data_ptr(), x.shape[0], out.data_ptr()) != 0:
            raise MemoryError("fused LM head: the native kernel could not allocate its scratch memory")
        return out
