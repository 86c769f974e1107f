"""DeepSeek-V4 KV compressors: every `rate` tokens become one compressed entry.

Each token projects a value `kv` and a gate; an entry is the per-feature softmax(gate + position_bias)-weighted
sum of its window's values, RMS-normalised, with RoPE at the window's first position. Heavily compressed
attention pools each window alone. Compressed sparse attention (and its lightning indexer) projects two
series per token, Ca and Cb (`2 * dim` features): entry w pools window w-1's Ca with window w's Cb, 2 * rate
slots (window -1 does not exist: weight 0). The indexer scores every query against the indexer's entries,
`sum_h w_h * relu(q_h . k)`, and each query attends to its `top_k` best causally complete entries.
"""

from __future__ import annotations

import torch
from recipe.engine.layers.cast import as_dtype
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.v4_rope import rotate_tail
from torch import nn


class Compressor(nn.Module):
    """Projections and pooling of one compressed series (the main compressor, or an indexer's)."""

    def __init__(self, hidden_size: int, dim: int, rate: int, overlap: bool, eps: float) -> None:
        super().__init__()
        self.dim, self.rate, self.overlap = dim, rate, overlap
        width = 2 * dim if overlap else dim
        self.kv_proj = nn.Linear(hidden_size, width, bias=False)
        self.gate_proj = nn.Linear(hidden_size, width, bias=False)
        self.position_bias = nn.Parameter(torch.empty(rate, width, dtype=torch.float32))
        self.kv_norm = RMSNorm(dim, eps)

    @property
    def record_width(self) -> int:
        """Per-token features kept until the token's windows are pooled."""
        return 2 * self.kv_proj.out_features

    def records(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, hidden] -> per-token [kv | gate] [N, record_width]."""
        return torch.cat((self.kv_proj(x), self.gate_proj(x)), dim=-1)

    def pool(self, records: torch.Tensor, first_window: int, cis: torch.Tensor) -> torch.Tensor:
        """Entries for windows first_window.. from `records` of whole windows; with overlap the records start
        one window earlier (at window first_window - 1) unless first_window is 0. cis: the RoPE factors of
        each new entry's position. -> [num_windows, dim]."""
        m, width = self.rate, self.kv_proj.out_features
        kv, gate = records.view(-1, m, 2 * width).split(width, dim=-1)
        gate = gate + as_dtype(self.position_bias, gate.dtype)
        if self.overlap:
            d = self.dim
            has_prev = 1 if first_window > 0 else 0
            cur_kv, cur_gate = kv[has_prev:, :, d:], gate[has_prev:, :, d:]
            prev_kv = torch.zeros_like(cur_kv)
            prev_gate = torch.full_like(cur_gate, float("-inf"))
            prev_kv[1 - has_prev :] = kv[: kv.shape[0] - 1, :, :d]
            prev_gate[1 - has_prev :] = gate[: gate.shape[0] - 1, :, :d]
            kv, gate = torch.cat((prev_kv, cur_kv), dim=1), torch.cat((prev_gate, cur_gate), dim=1)
        pooled = (kv * as_dtype(gate.softmax(dim=1, dtype=torch.float32), kv.dtype)).sum(dim=1)
        return rotate_tail(self.kv_norm(pooled), cis)

    def pool_windows(self, records: torch.Tensor, has_prev: torch.Tensor, cis: torch.Tensor
                     ) -> torch.Tensor:
        """One entry per row of independent windows, as `pool` computes it: records [P, S * rate, width] of one
        window each (S = 1), or with overlap of the previous window then the window (S = 2; the previous
        window's records are ignored where `has_prev` [P] is False). cis: each entry's RoPE factors
        -> [P, dim]."""
        m, width = self.rate, self.kv_proj.out_features
        kv, gate = records.view(records.shape[0], -1, m, 2 * width).split(width, dim=-1)
        gate = gate + as_dtype(self.position_bias, gate.dtype)
        if self.overlap:
            d = self.dim
            keep = has_prev.view(-1, 1, 1)
            prev_kv = torch.where(keep, kv[:, 0, :, :d], 0.0)
            prev_gate = torch.where(keep, gate[:, 0, :, :d], float("-inf"))
            kv = torch.cat((prev_kv, kv[:, 1, :, d:]), dim=1)
            gate = torch.cat((prev_gate, gate[:, 1, :, d:]), dim=1)
        else:
            kv, gate = kv[:, 0], gate[:, 0]
        pooled = (kv * as_dtype(gate.softmax(dim=1, dtype=torch.float32), kv.dtype)).sum(dim=1)
        return rotate_tail(self.kv_norm(pooled), cis)


class Indexer(nn.Module):
    """The lightning indexer of compressed sparse attention."""

    def __init__(self, hidden_size: int, q_lora_rank: int, num_heads: int, head_dim: int, top_k: int, rate: int,
                 eps: float) -> None:
        super().__init__()
        self.num_heads, self.head_dim, self.top_k, self.rate = num_heads, head_dim, top_k, rate
        self.compressor = Compressor(hidden_size, head_dim, rate, overlap=True, eps=eps)
        self.q_b_proj = nn.Linear(q_lora_rank, num_heads * head_dim, bias=False)
        self.weights_proj = nn.Linear(hidden_size, num_heads, bias=False)

    def queries(self, q_residual: torch.Tensor, x: torch.Tensor, cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rotated indexer queries [N, heads, head_dim], head weights [N, heads]), fp32."""
        q = self.q_b_proj(q_residual).view(x.shape[0], self.num_heads, self.head_dim)
        q = rotate_tail(q, cis).float()
        w = self.weights_proj(x).float() * self.num_heads**-0.5
        return q, w

    def select(self, q: torch.Tensor, w: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Which of the `keys` [E, head_dim] each query (positions [n]) attends to -> bool [n, E]."""
        n, e = q.shape[0], keys.shape[0]
        if e == 0:
            return torch.zeros((n, 0), dtype=torch.bool, device=q.device)
        complete = (positions + 1) // self.rate  # entries whose window ended at or before the query
        return self.select_rows(q, w, keys, torch.arange(e, device=q.device)[None, :] < complete[:, None])

    def select_rows(self, q: torch.Tensor, w: torch.Tensor, keys: torch.Tensor, complete: torch.Tensor
                    ) -> torch.Tensor:
        """Top-k selection: q [B, heads, head_dim], w [B, heads], keys [B, E, head_dim] (each row's own) or
        [E, head_dim] (shared), complete bool [B, E] (the entries each row may pick) -> bool [B, E]."""
        b, e = complete.shape
        scores = torch.relu(torch.matmul(q, keys.float().transpose(-1, -2))) * self.head_dim**-0.5  # [B, heads, E]
        scores = (scores * w.unsqueeze(-1)).sum(dim=1).masked_fill(~complete, float("-inf"))  # [B, E]
        picks = scores.topk(min(self.top_k, e), dim=-1).indices
        valid = complete.gather(1, picks)
        spill = torch.zeros((b, e + 1), dtype=torch.bool, device=q.device)  # invalid picks land in column e
        spill.scatter_(1, torch.where(valid, picks, e), True)
        return spill[:, :e]
