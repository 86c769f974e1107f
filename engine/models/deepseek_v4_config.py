"""The shape of a DeepSeek-V4 model, read from its config.json as `transformers` 5.24 reads it (including the
legacy keys of the original releases: `compress_ratios`, `num_hash_layers`, `qk_rope_head_dim`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from recipe.engine.models.weights import CheckpointError

LAYER_TYPES = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")
MLP_LAYER_TYPES = ("hash_moe", "moe")
_RATIO_TO_TYPE = {0: LAYER_TYPES[0], 4: LAYER_TYPES[1], 128: LAYER_TYPES[2]}
DEFAULT_RATES = {LAYER_TYPES[1]: 4, LAYER_TYPES[2]: 128}


def default_layer_types(n: int) -> list[str]:
    """Two heavily compressed layers, then compressed sparse and heavily compressed alternating."""
    rest = [LAYER_TYPES[1] if i % 2 else LAYER_TYPES[2] for i in range(max(n - 2, 0))]
    return [LAYER_TYPES[2]] * min(n, 2) + rest


@dataclass(frozen=True)
class DeepseekV4Config:
    vocab_size: int
    hidden_size: int
    moe_intermediate_size: int
    num_layers: int
    num_heads: int
    head_dim: int
    q_lora_rank: int
    rope_head_dim: int
    num_experts_per_tok: int
    n_routed_experts: int
    scoring_func: str
    routed_scaling_factor: float
    layer_types: tuple[str, ...]
    mlp_layer_types: tuple[str, ...]
    compress_rates: dict[str, int]
    hc_mult: int
    hc_sinkhorn_iters: int
    hc_eps: float
    swiglu_limit: float
    sliding_window: int
    o_groups: int
    o_lora_rank: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    num_mtp_layers: int
    rms_norm_eps: float
    max_positions: int
    tie_word_embeddings: bool
    rope_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the multi-token-prediction layers' attention and MoE kinds: the schedules' entries past the decoder
    # layers (the release's `compress_ratios` ends with the MTP layer's), else sliding window, score-routed
    mtp_layer_types: tuple[str, ...] = ()
    mtp_mlp_layer_types: tuple[str, ...] = ()

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> DeepseekV4Config:
        if cfg.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"unsupported hidden_act {cfg.get('hidden_act')!r}; DeepSeek-V4 uses silu")
        n = int(cfg["num_hidden_layers"])
        rates = dict(DEFAULT_RATES)
        rates.update({str(k): int(v) for k, v in (cfg.get("compress_rates") or {}).items()})
        for legacy, kind in (("compress_rate_csa", LAYER_TYPES[1]), ("compress_rate_hca", LAYER_TYPES[2])):
            if cfg.get(legacy) is not None:
                rates[kind] = int(cfg[legacy])
        layer_types = cfg.get("layer_types")
        if layer_types is None and cfg.get("compress_ratios") is not None:
            layer_types = [_RATIO_TO_TYPE[int(r)] for r in cfg["compress_ratios"]]
        n_mtp = int(cfg.get("num_nextn_predict_layers", 0) or 0)
        all_types = list(layer_types or default_layer_types(n))
        layer_types = all_types[:n]
        mtp_types = (all_types[n:] + [LAYER_TYPES[0]] * n_mtp)[:n_mtp]
        mlp_types = cfg.get("mlp_layer_types")
        if mlp_types is None:
            n_hash = int(cfg.get("num_hash_layers", 3))
            mlp_types = ["hash_moe"] * min(n, n_hash) + ["moe"] * max(0, n - n_hash)
        mtp_mlp_types = (list(mlp_types)[n:] + ["moe"] * n_mtp)[:n_mtp]
        mlp_types = list(mlp_types)[:n]
        for name, types, allowed, count in (("layer_types", layer_types, LAYER_TYPES, n),
                                            ("mlp_layer_types", mlp_types, MLP_LAYER_TYPES, n),
                                            ("the MTP layer types", mtp_types + mtp_mlp_types,
                                             LAYER_TYPES + MLP_LAYER_TYPES, 2 * n_mtp)):
            if len(types) != count or any(t not in allowed for t in types):
                raise CheckpointError(f"{name} must list {count} entries from {allowed}; got {types}")
        head_dim = int(cfg.get("head_dim", 512))
        partial = cfg.get("partial_rotary_factor")
        if partial is None:
            partial = int(cfg["qk_rope_head_dim"]) / head_dim if cfg.get("qk_rope_head_dim") else 64 / 512
        rope_dim = int(head_dim * float(partial))
        return cls(
            vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
            moe_intermediate_size=int(cfg["moe_intermediate_size"]), num_layers=n,
            num_heads=int(cfg["num_attention_heads"]), head_dim=head_dim, q_lora_rank=int(cfg["q_lora_rank"]),
            rope_head_dim=rope_dim, num_experts_per_tok=int(cfg["num_experts_per_tok"]),
            n_routed_experts=int(cfg["n_routed_experts"]), scoring_func=str(cfg.get("scoring_func", "sqrtsoftplus")),
            routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.5)),
            layer_types=tuple(layer_types), mlp_layer_types=tuple(mlp_types), compress_rates=rates,
            hc_mult=int(cfg.get("hc_mult", 4)), hc_sinkhorn_iters=int(cfg.get("hc_sinkhorn_iters", 20)),
            hc_eps=float(cfg.get("hc_eps", 1e-6)), swiglu_limit=float(cfg.get("swiglu_limit", 10.0)),
            sliding_window=int(cfg.get("sliding_window", 128)), o_groups=int(cfg.get("o_groups", 8)),
            o_lora_rank=int(cfg.get("o_lora_rank", 1024)), index_n_heads=int(cfg.get("index_n_heads", 64)),
            index_head_dim=int(cfg.get("index_head_dim", 128)), index_topk=int(cfg.get("index_topk", 512)),
            num_mtp_layers=n_mtp, mtp_layer_types=tuple(mtp_types), mtp_mlp_layer_types=tuple(mtp_mlp_types),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_positions=int(cfg.get("max_position_embeddings", 1048576)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            rope_parameters=_rope_parameters(cfg, float(partial)),
        )

    def rate(self, layer_type: str) -> int:
        return self.compress_rates.get(layer_type, 0)


def _rope_parameters(cfg: Mapping[str, Any], partial: float) -> dict[str, dict[str, Any]]:
    """{"main": plain RoPE at rope_theta, "compress": compress_rope_theta with the config's scaling (YaRN
    without its magnitude correction)}, or the nested dict the config already carries."""
    rp = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    if isinstance(rp.get("main"), dict) and isinstance(rp.get("compress"), dict):
        out = {"main": dict(rp["main"]), "compress": dict(rp["compress"])}
    else:
        scaling = {k: v for k, v in rp.items() if k not in ("main", "compress")}
        if "type" in scaling:
            scaling.setdefault("rope_type", scaling.pop("type"))
        main = {"rope_type": "default", "rope_theta": float(cfg.get("rope_theta", 10000.0))}
        compress = {**scaling, "rope_theta": float(cfg.get("compress_rope_theta", 160000.0))}
        compress.setdefault("rope_type", "default")
        if compress["rope_type"] == "yarn":
            compress.setdefault("attention_factor", 1.0)
        out = {"main": main, "compress": compress}
    for p in out.values():
        p.setdefault("rope_type", p.pop("type", "default"))
        if p["rope_type"] == "yarn":
            p.setdefault("original_max_position_embeddings", cfg.get("max_position_embeddings"))
    return out


def v4_chat_format(cfg: Mapping[str, Any]) -> str:
    """The prompt codec of a V4 checkpoint: "deepseek_v41" when the config names V4.1 (its architecture,
    `model_version`, or the name it was saved under), else "deepseek_v4"."""
    names = [str(a) for a in cfg.get("architectures") or []]
    names += [str(cfg.get("model_version", "")), str(cfg.get("_name_or_path", ""))]
    marks = ("v41", "v4.1", "v4_1", "4.1")
    return "deepseek_v41" if any(m in n.lower() for n in names for m in marks) else "deepseek_v4"
