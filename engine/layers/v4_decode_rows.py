"""The decode rows of a DeepSeek-V4 step, gathered once per step for one batched attention call per layer
(`attention_backend="batched"`; the per-sequence loop in `v4_attention.py` is the reference).

A decode row is a sequence adding one token at position p with no replay bounds (`V4Span.window_from` and
`compressed_until` 0). Every layer reads the same cache rows of it (each layer owns a column slice of the
same pools), so the slots are computed here once and every layer gathers its columns with them:
- the window: positions p - window + 1 .. p (padded below 0 and masked);
- per compressed kind of rate m: the entries 0 .. (p + 1) // m - 1 (padded to the row with most entries and
  masked), and, for the rows whose token completes a window (w = p // m when (p + 1) % m == 0), the records
  of the window pooled (with overlap also window w - 1's; window -1 does not exist) and the entry's slot.
A slot is `table[row // rows_per_block] * rows_per_block + row % rows_per_block` of the pool's flat rows (slot
0 for a masked one). Every slot that is read unmasked or written is checked against released blocks once
here, not per layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from recipe.engine.layers.v4_kv import V4Plan, V4Span


@dataclass(frozen=True)
class CompressedRows:
    """One compressed kind's slots for the decode rows (B rows, E the most entries of any row, P the rows
    that complete a window this step, S = 2 with overlap, else 1)."""

    entry_slots: torch.Tensor  # int64 [B, E], masked entries point at a valid slot
    entry_valid: torch.Tensor  # bool [B, E]: the entry exists (its window is complete)
    pool_rows: torch.Tensor  # int64 [P]: index into the decode rows
    record_slots: torch.Tensor  # int64 [P, S * rate]: window-pool slots of the pooled records
    has_prev: torch.Tensor  # bool [P]: the previous window exists (read with overlap only)
    window_pos: torch.Tensor  # int64 [P]: first position of the pooled window (the entry's RoPE position)
    write_slots: torch.Tensor  # int64 [P]: compressed-pool slot of each new entry


def _slots(table: torch.Tensor, rows: torch.Tensor, rows_per_block: int, used: torch.Tensor) -> torch.Tensor:
    """table [B, nb] block ids, rows [B, K] -> flat pool slots [B, K] where `used` (those rows must lie in held
    blocks), slot 0 elsewhere (read, then masked)."""
    rows = torch.where(used, rows, 0)
    blocks = torch.where(used, table.gather(1, rows // rows_per_block), 0)  # unused: block 0, row 0 -> slot 0
    assert blocks.numel() == 0 or int(blocks.min()) >= 0, "read or write of a released block"
    return blocks * rows_per_block + rows % rows_per_block


def _stack(tables: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(tables, batch_first=True, padding_value=-1)


class DecodeRows:
    """The decode rows of one step for one window kind (see the module docstring); `others` are the spans
    left to the per-sequence loop."""

    def __init__(self, decode: list[V4Span], others: list[V4Span], window_kind: str, rows_per_block: int,
                 window: int, tables: Mapping[str, torch.Tensor] | None = None, index: list[int] | None = None
                 ) -> None:
        """`tables`: the plan's stacked tables (row i: span i) and `index` the decode spans' rows in them."""
        self.spans, self.others, self.window_kind = decode, others, window_kind
        dev = decode[0].tables[window_kind].device
        self.positions = torch.tensor([s.pos0 for s in decode], dtype=torch.int64, device=dev)
        self.rows = torch.tensor([s.start for s in decode], dtype=torch.int64, device=dev)
        self.all_rows = not others and [s.start for s in decode] == list(range(len(decode)))
        self._tables, self._index = tables, None
        if tables is not None and others:
            assert index is not None
            self._index = torch.tensor(index, dtype=torch.int64, device=dev)
        self.window_table = self._table(window_kind)
        self.window_rpb = rows_per_block
        p = self.positions[:, None]
        self.write_slots = _slots(self.window_table, p, rows_per_block, torch.ones_like(p, dtype=torch.bool))
        self.write_slots = self.write_slots.view(-1)
        kpos = p - window + 1 + torch.arange(window, device=dev)[None, :]
        self.window_visible = kpos >= 0
        self.window_slots = _slots(self.window_table, kpos, rows_per_block, self.window_visible)
        self._compressed: dict[tuple[str, int, int, bool], CompressedRows] = {}

    def compressed(self, kind: str, rows_per_block: int, rate: int, overlap: bool) -> CompressedRows:
        key = (kind, rows_per_block, rate, overlap)
        if key not in self._compressed:
            self._compressed[key] = self._build(kind, rows_per_block, rate, overlap)
        return self._compressed[key]

    def _table(self, kind: str) -> torch.Tensor:
        """The decode rows' block tables of `kind`, stacked [B, max_blocks]."""
        if self._tables is None:
            return _stack([s.tables[kind] for s in self.spans])
        table = self._tables[kind]
        return table if self._index is None else table.index_select(0, self._index)

    def _build(self, kind: str, rows_per_block: int, rate: int, overlap: bool) -> CompressedRows:
        dev = self.positions.device
        table = self._table(kind)
        hosts = [s.pos0 for s in self.spans]
        counts = torch.tensor([(p + 1) // rate for p in hosts], dtype=torch.int64, device=dev)
        most = max((p + 1) // rate for p in hosts)
        entries = torch.arange(most, device=dev)[None, :].expand(len(hosts), most)
        valid = entries < counts[:, None]
        entry_slots = _slots(table, entries, rows_per_block, valid)
        pool = [i for i, p in enumerate(hosts) if (p + 1) % rate == 0]
        pool_rows = torch.tensor(pool, dtype=torch.int64, device=dev)
        windows = self.positions.index_select(0, pool_rows) // rate  # [P]
        span = 2 * rate if overlap else rate
        first = (windows - 1) * rate if overlap else windows * rate
        rpos = first[:, None] + torch.arange(span, device=dev)[None, :]
        kept = rpos >= 0
        record_slots = _slots(self.window_table.index_select(0, pool_rows), rpos, self.window_rpb, kept)
        own = table.index_select(0, pool_rows)
        write_slots = _slots(own, windows[:, None], rows_per_block, torch.ones_like(kept[:, :1]))
        return CompressedRows(
            entry_slots=entry_slots, entry_valid=valid, pool_rows=pool_rows, record_slots=record_slots,
            has_prev=windows > 0, window_pos=windows * rate, write_slots=write_slots.view(-1),
        )


def decode_rows(plan: V4Plan, window_kind: str, rows_per_block: int, window: int) -> DecodeRows | None:
    """The plan's decode rows (built once per step and window; every layer shares them), or None when the
    plan is not batched or has none."""
    if not plan.batched:
        return None
    key = (window_kind, rows_per_block, window)
    if key not in plan.memo:
        is_decode = [s.end - s.start == 1 and not s.window_from and not s.compressed_until for s in plan.spans]
        index = [i for i, d in enumerate(is_decode) if d]
        decode = [plan.spans[i] for i in index]
        others = [s for s, d in zip(plan.spans, is_decode, strict=True) if not d]
        plan.memo[key] = (DecodeRows(decode, others, window_kind, rows_per_block, window, plan.tables, index)
                          if decode else None)
    result = plan.memo[key]
    assert result is None or isinstance(result, DecodeRows)
    return result
