"""Tiny random DeepSeek-V4 checkpoints written by `transformers`, and a driver that runs the engine's V4 model
over its paged multi-kind cache (block tables allocated here, window blocks released as they slide out)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from recipe.engine.layers.v4_kv import RELEASED, V4Plan, V4Span
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from recipe.engine.models.deepseek_v4_config import DeepseekV4Config
from recipe.engine.models.safetensors_loader import SafetensorsCheckpoint

CSA, HCA, SWA = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"

V4_TINY: dict[str, Any] = dict(
    vocab_size=96, hidden_size=32, moe_intermediate_size=16, num_attention_heads=4, head_dim=16, q_lora_rank=16,
    num_experts_per_tok=2, n_routed_experts=4, sliding_window=8, o_groups=2, o_lora_rank=8, index_n_heads=8,
    index_head_dim=8, index_topk=3, partial_rotary_factor=0.5, hc_mult=2, hc_sinkhorn_iters=3,
    num_nextn_predict_layers=0, initializer_range=0.2, max_position_embeddings=256, bos_token_id=0,
    eos_token_id=1, compress_rates={CSA: 2, HCA: 8},
)

PATTERNS: dict[str, dict[str, Any]] = {
    # every layer type and both MoE kinds, interleaved
    "mixed": dict(num_hidden_layers=4, layer_types=[SWA, CSA, HCA, CSA],
                  mlp_layer_types=["hash_moe", "moe", "hash_moe", "moe"]),
    # transformers' default schedules (HCA, HCA, then CSA/HCA; three hash layers first) with YaRN on the
    # compressed layers' RoPE
    "default": dict(num_hidden_layers=5, compress_rates={CSA: 4, HCA: 8},
                    rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
}


def write_v4_checkpoint(path: Path, pattern: str, seed: int = 0, **overrides: Any) -> Path:
    """`V4_TINY` with `PATTERNS[pattern]` and then `overrides` (e.g. more experts) applied."""
    from transformers import DeepseekV4Config as HFConfig
    from transformers import DeepseekV4ForCausalLM as HFModel

    torch.manual_seed(seed)
    config = {**V4_TINY, **PATTERNS[pattern], **overrides}
    model = HFModel(HFConfig(**config)).eval()
    randomize(model, config)
    model.save_pretrained(path)
    return path


def randomize(model: Any, config: dict[str, Any] = V4_TINY) -> None:
    """The default init zeroes sinks, biases and position biases: give them values (and hash tables)."""
    vocab, k, experts = config["vocab_size"], config["num_experts_per_tok"], config["n_routed_experts"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(s in name for s in ("sinks", "position_bias", ".base", "hc_base")):
                p.normal_(0, 0.5)
            elif name.endswith("scale"):
                p.normal_(1, 0.3)
        for layer in model.model.layers:
            gate = layer.mlp.gate
            if hasattr(gate, "tid2eid"):
                gate.tid2eid.copy_(torch.stack([torch.randperm(experts)[:k] for _ in range(vocab)]))
            else:
                gate.e_score_correction_bias.normal_(0, 0.1)


MTP_BLOCK = dict(num_hidden_layers=1, layer_types=[SWA], mlp_layer_types=["moe"])  # the release's MTP layer


def mtp_block_model(seed: int) -> Any:
    """A one-layer `transformers` V4 whose layer, hc_head and norm are an MTP layer's block and head (random)."""
    from transformers import DeepseekV4Config as HFConfig
    from transformers import DeepseekV4ForCausalLM as HFModel

    torch.manual_seed(seed)
    model = HFModel(HFConfig(**{**V4_TINY, **MTP_BLOCK})).eval()
    randomize(model)
    return model


def add_mtp_layer(path: Path, seed: int = 1) -> dict[str, torch.Tensor]:
    """Give a checkpoint written by `write_v4_checkpoint` one MTP layer in the release layout (`mtp.0.*`: the
    block under the decoder layers' names, enorm / hnorm / e_proj / h_proj / norm / hc_head_*), set
    `num_nextn_predict_layers` to 1, and return the added tensors. Its block is `mtp_block_model(seed)`'s."""
    from safetensors.torch import load_file, save_file

    block = mtp_block_model(seed)
    with torch.no_grad():
        tmp = path / "mtp_block"
        block.save_pretrained(tmp)
        written = load_file(str(tmp / "model.safetensors"))
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    g = torch.Generator().manual_seed(seed)
    d = V4_TINY["hidden_size"]
    mtp = {"mtp.0." + k[len("model.layers.0."):]: v for k, v in written.items() if k.startswith("model.layers.0.")}
    mtp |= {"mtp.0.norm.weight": written["model.norm.weight"], "mtp.0.hc_head_fn": written["model.hc_head.hc_fn"],
            "mtp.0.hc_head_base": written["model.hc_head.hc_base"],
            "mtp.0.hc_head_scale": written["model.hc_head.hc_scale"],
            "mtp.0.enorm.weight": 1 + 0.3 * torch.randn(d, generator=g),
            "mtp.0.hnorm.weight": 1 + 0.3 * torch.randn(d, generator=g),
            "mtp.0.e_proj.weight": 0.2 * torch.randn(d, d, generator=g),
            "mtp.0.h_proj.weight": 0.2 * torch.randn(d, d, generator=g)}
    main = load_file(str(path / "model.safetensors"))
    save_file({**main, **{k: v.contiguous() for k, v in mtp.items()}}, str(path / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    (path / "config.json").write_text(json.dumps(config))
    return mtp


def load_engine_v4(path: Path, num_blocks: int = 256, block_size: int = 4) -> DeepseekV4ForCausalLM:
    config = json.loads((path / "config.json").read_text())
    model = DeepseekV4ForCausalLM(DeepseekV4Config.from_hf(config))
    model.load_weights(SafetensorsCheckpoint(path))
    model.eval()
    model.allocate_kv_cache(num_blocks, block_size, torch.float32, "cpu")
    return model


class V4Driver:
    """Runs sequences through the engine model: each sequence owns blocks of every kind (disjoint per
    sequence); after every step the window blocks wholly before the lookback are released."""

    def __init__(self, model: DeepseekV4ForCausalLM, block_size: int = 4, batched: bool = False) -> None:
        """`batched`: the decode rows attend in one batched call per layer (the "batched" attention backend)."""
        self.model, self.bs, self.batched = model, block_size, batched
        self.specs = {s.name: s for s in model.cache_specs()}
        self.next_block = dict.fromkeys(self.specs, 0)
        self.tables: dict[int, dict[str, torch.Tensor]] = {}
        self.released = 0

    def _table(self, seq: int, kind: str) -> torch.Tensor:
        tables = self.tables.setdefault(seq, {})
        if kind not in tables:
            start = self.next_block[kind]
            self.next_block[kind] += 24
            tables[kind] = torch.arange(start, start + 24)
        return tables[kind]

    @torch.inference_mode()
    def step(self, work: list[tuple[int, int, list[int]]]) -> list[torch.Tensor]:
        """work: (seq, first position, token ids) per sequence -> logits [len(ids), V] per sequence."""
        spans, ids, pos, row = [], [], [], 0
        for seq, p0, toks in work:
            tables = {kind: self._table(seq, kind) for kind in self.specs}
            spans.append(V4Span(row, row + len(toks), p0, tables))
            ids += toks
            pos += list(range(p0, p0 + len(toks)))
            row += len(toks)
        hidden = self.model(torch.tensor(ids), torch.tensor(pos), V4Plan(tuple(spans), self.bs, self.batched))
        logits = self.model.compute_logits(hidden)
        lookback = self.specs["window"].window
        assert lookback is not None
        for (_, p0, toks), span in zip(work, spans, strict=True):
            window = span.tables["window"]
            keep_from = p0 + len(toks) - lookback  # positions below are never read again
            for b in range(max(0, keep_from) // self.bs):
                if int(window[b]) != RELEASED:
                    window[b] = RELEASED
                    self.released += 1
        out, start = [], 0
        for _, _, toks in work:
            out.append(logits[start : start + len(toks)])
            start += len(toks)
        return out
