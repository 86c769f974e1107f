"""DeepSeek-V4 attention: shared-key-value multi-query attention over a sliding window plus, on compressed
layers, compressed entries of the whole history.

One KV head whose key is also its value; partial interleaved RoPE on the trailing channels, undone on the
output (so each value contributes by relative position); a learned per-head sink in the softmax
denominator; a grouped low-rank output projection. Layer types:
- `sliding_attention`: the last `sliding_window` tokens only;
- `heavily_compressed_attention`: plus every complete window of `rate` tokens, compressed to one entry;
- `compressed_sparse_attention`: plus the `index_topk` overlapping compressed entries the lightning indexer
  picks per query.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from recipe.engine.layers.cast import as_dtype
from recipe.engine.layers.compressor import Compressor, Indexer
from recipe.engine.layers.hyper_connections import unweighted_rms_norm
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.v4_decode_rows import DecodeRows, decode_rows
from recipe.engine.layers.v4_kv import PagedRows, V4Plan, V4Span
from recipe.engine.layers.v4_rope import V4Rotary, rotate_tail
from torch import nn

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"


def attend_with_sinks(q: torch.Tensor, keys: torch.Tensor, visible: torch.Tensor, sinks: torch.Tensor,
                      scale: float) -> torch.Tensor:
    """q [n, H, D] over shared keys=values [K, D] (or each row's own [n, K, D]); visible bool [n, K]; one sink
    logit per head -> [n, H, D]."""
    n, heads, _ = q.shape
    logits = torch.matmul(q, keys.transpose(-1, -2)) * scale  # [n, H, K]
    logits = logits.masked_fill(~visible[:, None, :], float("-inf"))
    logits = torch.cat((logits, as_dtype(sinks, logits.dtype).view(1, heads, 1).expand(n, heads, 1)), dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    probs = F.softmax(logits, dim=-1)[..., :-1]
    return torch.matmul(as_dtype(probs, keys.dtype), keys)


class V4Attention(nn.Module):
    def __init__(self, layer_type: str, hidden_size: int, num_heads: int, head_dim: int, q_lora_rank: int,
                 o_groups: int, o_lora_rank: int, sliding_window: int, rate: int, index_heads: int,
                 index_head_dim: int, index_topk: int, eps: float) -> None:
        super().__init__()
        self.layer_type, self.num_heads, self.head_dim = layer_type, num_heads, head_dim
        self.window, self.rate, self.eps, self.o_groups = sliding_window, rate, eps, o_groups
        self.q_a_proj = nn.Linear(hidden_size, q_lora_rank, bias=False)
        self.q_a_norm = RMSNorm(q_lora_rank, eps)
        self.q_b_proj = nn.Linear(q_lora_rank, num_heads * head_dim, bias=False)
        self.kv_proj = nn.Linear(hidden_size, head_dim, bias=False)
        self.kv_norm = RMSNorm(head_dim, eps)
        self.o_a_proj = nn.Linear(num_heads * head_dim // o_groups, o_groups * o_lora_rank, bias=False)
        self.o_b_proj = nn.Linear(o_groups * o_lora_rank, hidden_size, bias=False)
        self.sinks = nn.Parameter(torch.empty(num_heads, dtype=torch.float32))
        self.compressor: Compressor | None = None
        self.indexer: Indexer | None = None
        if layer_type != SLIDING:
            self.compressor = Compressor(hidden_size, head_dim, rate, overlap=layer_type == CSA, eps=eps)
        if layer_type == CSA:
            self.indexer = Indexer(hidden_size, q_lora_rank, index_heads, index_head_dim, index_topk, rate, eps)
        self.window_rows: PagedRows | None = None  # views into the pools, set by the model
        self.compressed_rows: PagedRows | None = None

    # ----- cache layout ---------------------------------------------------------------------------------
    @property
    def window_row_width(self) -> int:
        """Per token: the key (= value), then the compressors' records."""
        width = self.head_dim
        if self.compressor is not None:
            width += self.compressor.record_width
        if self.indexer is not None:
            width += self.indexer.compressor.record_width
        return width

    @property
    def compressed_row_width(self) -> int:
        if self.compressor is None:
            return 0
        return self.head_dim + (self.indexer.head_dim if self.indexer is not None else 0)

    @property
    def lookback(self) -> int:
        """Tokens before a step's first token whose window rows the step reads."""
        back = self.window - 1
        if self.compressor is not None:
            back = max(back, (2 * self.rate if self.indexer is not None else self.rate) - 1)
        return back

    # ----- forward --------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, positions: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                plan: V4Plan, window_kind: str, compressed_kind: str | None, compress_rope: V4Rotary
                ) -> torch.Tensor:
        """x [N, hidden] (normalised) -> [N, hidden]; rope: this layer's RoPE factors at `positions`
        (`V4Rotary.factors`: forward, back);
        `compress_rope` places the compressed entries."""
        n = x.shape[0]
        q_residual = self.q_a_norm(self.q_a_proj(x))
        q = unweighted_rms_norm(self.q_b_proj(q_residual).view(n, self.num_heads, self.head_dim), self.eps)
        cis, back = rope
        q = rotate_tail(q, cis)
        kv = rotate_tail(self.kv_norm(self.kv_proj(x)), cis)
        rows = [kv]
        iq: torch.Tensor | None = None
        iw: torch.Tensor | None = None
        if self.compressor is not None:
            rows.append(self.compressor.records(x))
        if self.indexer is not None:
            rows.append(self.indexer.compressor.records(x))
            iq, iw = self.indexer.queries(q_residual, x, cis)
        new_rows = torch.cat(rows, dim=-1)
        out = torch.empty_like(q)
        assert self.window_rows is not None, "the KV cache was not allocated"
        decode = decode_rows(plan, window_kind, self.window_rows.block_size, self.window)
        for span in plan.spans if decode is None else decode.others:
            s, e = span.start, span.end
            out[s:e] = self._attend_span(span, q[s:e], new_rows[s:e], positions[s:e],
                                         None if iq is None else iq[s:e], None if iw is None else iw[s:e],
                                         window_kind, compressed_kind, compress_rope)
        if decode is not None:
            got = self._attend_decode(decode, q, new_rows, iq, iw, compressed_kind, compress_rope)
            if decode.all_rows:
                out = got
            else:
                out.index_copy_(0, decode.rows, got)
        out = rotate_tail(out, back)
        grouped = out.reshape(n, self.o_groups, -1)
        weight = self.o_a_proj.weight.view(self.o_groups, -1, grouped.shape[-1])
        grouped = torch.bmm(grouped.transpose(0, 1), weight.transpose(1, 2)).transpose(0, 1)
        return self.o_b_proj(grouped.reshape(n, -1))

    def _attend_span(self, span: V4Span, q: torch.Tensor, new_rows: torch.Tensor, qpos: torch.Tensor,
                     iq: torch.Tensor | None, iw: torch.Tensor | None,
                     window_kind: str, compressed_kind: str | None, compress_rope: V4Rotary) -> torch.Tensor:
        """The reference: one sequence's tokens (its rows of q, new_rows, positions, RoPE and indexer queries)
        write their rows and attend -> [n, H, D]."""
        assert self.window_rows is not None
        p0 = span.pos0
        p1 = p0 + span.end - span.start
        wtable = span.tables[window_kind]
        lo = max(0, p0 - self.lookback, span.window_from)  # no window rows below window_from
        past = self.window_rows.read(wtable, lo, p0)
        seq_rows = torch.cat((past, new_rows), dim=0)  # positions [lo, p1)
        # every new row is written, even those this sequence never reads again: a prefix hit ending
        # inside this step's tokens reads them
        self.window_rows.write(wtable, p0, new_rows)
        kpos = torch.arange(lo, p1, device=q.device)
        visible = (kpos[None, :] <= qpos[:, None]) & (kpos[None, :] > qpos[:, None] - self.window)
        keys = seq_rows[:, : self.head_dim]
        if self.compressor is not None:
            assert compressed_kind is not None and self.compressed_rows is not None
            entries, entry_visible = self._compressed(
                seq_rows, lo, p0, p1, span.tables[compressed_kind], qpos, q.dtype, iq, iw, compress_rope,
                span.compressed_until,
            )
            keys = torch.cat((keys, entries), dim=0)
            visible = torch.cat((visible, entry_visible), dim=1)
        return attend_with_sinks(q, keys, visible, self.sinks, self.head_dim**-0.5)

    def _attend_decode(self, decode: DecodeRows, q: torch.Tensor, new_rows: torch.Tensor, iq: torch.Tensor | None,
                       iw: torch.Tensor | None, compressed_kind: str | None, compress_rope: V4Rotary) -> torch.Tensor:
        """The decode rows at once (what `_attend_span` computes for each): write their rows, pool the windows
        they complete, gather window keys and compressed entries through the step's slots -> [B, H, D]."""
        assert self.window_rows is not None
        d, rows = self.head_dim, decode.rows
        if not decode.all_rows:
            q, new_rows = q.index_select(0, rows), new_rows.index_select(0, rows)
            iq = None if iq is None else iq.index_select(0, rows)
            iw = None if iw is None else iw.index_select(0, rows)
        flat = self.window_rows.flat
        flat.index_copy_(0, decode.write_slots, as_dtype(new_rows, flat.dtype))
        b, w = decode.window_slots.shape
        keys = flat[:, :d].index_select(0, decode.window_slots.view(-1)).view(b, w, d)
        visible = decode.window_visible
        if self.compressor is not None:
            assert compressed_kind is not None and self.compressed_rows is not None
            cflat = self.compressed_rows.flat
            c = decode.compressed(compressed_kind, self.compressed_rows.block_size, self.rate, self.indexer is not None)
            num_pooled = c.pool_rows.shape[0]
            if num_pooled:
                records = flat.index_select(0, c.record_slots.view(-1)).view(num_pooled, -1, flat.shape[1])
                ccis = compress_rope.cis(c.window_pos, q.dtype)
                main_w = self.compressor.record_width
                new = [self.compressor.pool_windows(records[..., d : d + main_w], c.has_prev, ccis)]
                if self.indexer is not None:
                    new.append(self.indexer.compressor.pool_windows(records[..., d + main_w :], c.has_prev, ccis))
                cflat.index_copy_(0, c.write_slots, as_dtype(torch.cat(new, dim=-1), cflat.dtype))
            e = c.entry_slots.shape[1]
            if e:
                stored = cflat.index_select(0, c.entry_slots.view(-1)).view(b, e, cflat.shape[1])
                if self.indexer is None:
                    entry_visible = c.entry_valid
                else:
                    assert iq is not None and iw is not None
                    entry_visible = self.indexer.select_rows(iq, iw, stored[..., d:], c.entry_valid)
                keys = torch.cat((keys, stored[..., :d]), dim=1)
                visible = torch.cat((visible, entry_visible), dim=1)
        return attend_with_sinks(q, keys, visible, self.sinks, self.head_dim**-0.5)

    def _compressed(self, seq_rows: torch.Tensor, lo: int, p0: int, p1: int, table: torch.Tensor,
                    qpos: torch.Tensor, dtype: torch.dtype, iq: torch.Tensor | None,
                    iw: torch.Tensor | None, rope: V4Rotary, restored_until: int = 0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pool the windows completed in this step (but not those ending at or before `restored_until`, whose
        entries were restored), store them, and return (all entries [E, head_dim], which of them each query
        sees [n, E])."""
        assert self.compressor is not None and self.compressed_rows is not None
        m, d = self.rate, self.head_dim
        first, last = max(p0, restored_until) // m, p1 // m  # entries already stored; after this step
        if last > first:
            back = 1 if self.indexer is not None and first > 0 else 0
            a, b = (first - back) * m - lo, last * m - lo
            assert a >= 0, "a replay shorter than the compressor's lookback"
            wpos = torch.arange(first, last, device=seq_rows.device) * m
            ccis = rope.cis(wpos, dtype)
            main_w = self.compressor.record_width
            new = [self.compressor.pool(seq_rows[a:b, d : d + main_w], first, ccis)]
            if self.indexer is not None:
                new.append(self.indexer.compressor.pool(seq_rows[a:b, d + main_w :], first, ccis))
            self.compressed_rows.write(table, first, torch.cat(new, dim=-1))
        stored = self.compressed_rows.read(table, 0, last)
        entries = stored[:, :d]
        complete = (qpos + 1) // m
        if self.indexer is None:
            visible = torch.arange(last, device=qpos.device)[None, :] < complete[:, None]
        else:
            assert iq is not None and iw is not None
            visible = self.indexer.select(iq, iw, stored[:, d:], qpos)
        return entries, visible

