"""Loading a DeepSeek-V4 checkpoint in the release layout (`layers.N.attn.wq_a.weight`,
`ffn.experts.E.w1.weight`, `hc_attn_fn`, ...; `transformers` writes the same names under `model.`), with
block-quantised FP8/FP4 weights dequantised on the way, and the multi-token-prediction layers (`mtp.*`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from recipe.engine.layers.v4_moe import V4MoE
from recipe.engine.models.block_quant import DequantizedCheckpoint
from recipe.engine.models.deepseek_v4_layer import DeepseekV4DecoderLayer
from recipe.engine.models.deepseek_v4_mtp import DeepseekV4MTP
from recipe.engine.models.weights import CheckpointError, assign, check_all_used
from torch import nn

_ATTN = {"attn_sink": "sinks", "wq_a.weight": "q_a_proj.weight", "q_norm.weight": "q_a_norm.weight",
         "wq_b.weight": "q_b_proj.weight", "wkv.weight": "kv_proj.weight", "norm.weight": "kv_norm.weight",
         "wo_a.weight": "o_a_proj.weight", "wo_b.weight": "o_b_proj.weight"}
_COMPRESSOR = {"ape": "position_bias", "norm.weight": "kv_norm.weight", "wkv.weight": "kv_proj.weight",
               "wgate.weight": "gate_proj.weight"}
_TOP = {"embed_tokens.weight": ("embed.weight", "model.embed_tokens.weight"),
        "norm.weight": ("norm.weight", "model.norm.weight"),
        "lm_head.weight": ("head.weight", "lm_head.weight"),
        "hc_head.hc_fn": ("hc_head_fn", "model.hc_head.hc_fn"),
        "hc_head.hc_base": ("hc_head_base", "model.hc_head.hc_base"),
        "hc_head.hc_scale": ("hc_head_scale", "model.hc_head.hc_scale")}


_MTP = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight", "e_proj.weight": "e_proj.weight",
        "h_proj.weight": "h_proj.weight", "norm.weight": "norm.weight", "hc_head_fn": "hc_head.hc_fn",
        "hc_head_base": "hc_head.hc_base", "hc_head_scale": "hc_head.hc_scale"}


def load_v4_weights(model: Any, raw: Mapping[str, torch.Tensor]) -> None:
    """Load into `model`, a `DeepseekV4ForCausalLM` (typed `Any`: the model calls this, so naming its class here
    would be an import circle). Every checkpoint tensor must be used. MTP layers load from `mtp.{i}.` (or `model.mtp.{i}.`): the block
    under the decoder layers' names plus `_MTP`; a checkpoint without any `mtp.*` tensor (as `transformers`
    writes one, whatever `num_nextn_predict_layers` says) leaves the model without MTP layers."""
    source = DequantizedCheckpoint(raw)
    params: dict[str, torch.Tensor] = dict(model.named_parameters())
    params.update(dict(model.named_buffers()))
    used: set[str] = set()

    def put(target: str, name: str) -> None:
        if name not in source:
            raise CheckpointError(f"checkpoint has no tensor {name!r}")
        assign(params[target], source[name], name)
        used.add(name)

    for target, names in _TOP.items():
        if target == "lm_head.weight" and model.lm_head is None:
            continue
        found = [n for n in names if n in source]
        if not found:
            raise CheckpointError(f"checkpoint has no tensor {names[0]!r}")
        put(target, found[0])
    prefix = "model.layers." if any(k.startswith("model.layers.") for k in source) else "layers."
    for i, layer in enumerate(model.decoder_layers()):
        _load_layer(layer, f"{prefix}{i}.", f"layers.{i}.", put, source, used)
    mtp_names = [k for k in source if k.startswith(("mtp.", "model.mtp."))]
    if mtp_names and model.config.num_mtp_layers == 0:
        raise CheckpointError("checkpoint has multi-token-prediction tensors but num_nextn_predict_layers is 0")
    if not mtp_names:
        model.mtp = nn.ModuleList()
    mtp_prefix = "model.mtp." if any(k.startswith("model.mtp.") for k in mtp_names) else "mtp."
    for i, mtp in enumerate(model.mtp):
        assert isinstance(mtp, DeepseekV4MTP)
        src, dst = f"{mtp_prefix}{i}.", f"mtp.{i}."
        for s, d in _MTP.items():
            put(dst + d, src + s)
        _load_layer(mtp.block, src, dst + "block.", put, source, used)
    check_all_used(source, used)


def _load_layer(layer: DeepseekV4DecoderLayer, src: str, dst: str, put: Callable[[str, str], None],
                source: Mapping[str, torch.Tensor], used: set[str]) -> None:
    """One decoder layer (or an MTP layer's block) from the tensors under `src` into the parameters under `dst`."""
    put(dst + "input_layernorm.weight", src + "attn_norm.weight")
    put(dst + "post_attention_layernorm.weight", src + "ffn_norm.weight")
    for hc in ("attn", "ffn"):
        for part in ("fn", "base", "scale"):
            put(f"{dst}{hc}_hc.{part}", f"{src}hc_{hc}_{part}")
    for s, d in _ATTN.items():
        put(f"{dst}self_attn.{d}", f"{src}attn.{s}")
    if layer.self_attn.compressor is not None:
        for s, d in _COMPRESSOR.items():
            put(f"{dst}self_attn.compressor.{d}", f"{src}attn.compressor.{s}")
    if layer.self_attn.indexer is not None:
        for s, d in _COMPRESSOR.items():
            put(f"{dst}self_attn.indexer.compressor.{d}", f"{src}attn.indexer.compressor.{s}")
        put(f"{dst}self_attn.indexer.q_b_proj.weight", f"{src}attn.indexer.wq_b.weight")
        put(f"{dst}self_attn.indexer.weights_proj.weight", f"{src}attn.indexer.weights_proj.weight")
    ffn = src + "ffn."
    put(dst + "mlp.gate.weight", ffn + "gate.weight")
    if layer.mlp.gate.is_hash:
        put(dst + "mlp.gate.tid2eid", ffn + "gate.tid2eid")
    else:
        put(dst + "mlp.gate.e_score_correction_bias", ffn + "gate.bias")
    _load_experts(layer.mlp, ffn, source, used)


def _load_experts(mlp: V4MoE, ffn: str, source: Mapping[str, torch.Tensor], used: set[str]) -> None:
    def get(name: str) -> torch.Tensor:
        if name not in source:
            raise CheckpointError(f"checkpoint has no tensor {name!r}")
        used.add(name)
        return source[name]

    w_gate_up, w_down = mlp.w_gate_up, mlp.w_down
    for slot, e in mlp.expert_slots():  # every expert, or an expert-parallel rank's own
        x = f"{ffn}experts.{e}."
        names = [x + "w1.weight", x + "w3.weight"]
        assign(w_gate_up[slot], torch.cat([get(n) for n in names], dim=0), " + ".join(names))
        assign(w_down[slot], get(x + "w2.weight"), x + "w2.weight")
    sh = ffn + "shared_experts."
    gate_up = mlp.shared_gate_up.weight
    assign(gate_up, torch.cat([get(sh + "w1.weight"), get(sh + "w3.weight")], dim=0), sh + "w1/w3")
    assign(mlp.shared_down.weight, get(sh + "w2.weight"), sh + "w2.weight")
