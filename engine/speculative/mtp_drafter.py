"""Drafting with DeepSeek-V4's multi-token-prediction layer (`models/deepseek_v4_mtp.py` states its contract).

Catch-up (`after_step`, on the model thread right after each step): the MTP layer runs,
in one call, over every position of the step whose next token is now known (a prefill chunk's positions, and
of a sampled span those up to the last one whose next token was emitted: a verify row's last known token and
its accepted drafts) with the step's final streams (`last_streams`) and those next tokens. So the MTP layer's
own window rows at every computed position are the formula's, written in the blocks that hold the main
model's rows of the same positions. Each sampled sequence's last row gives the first draft token (argmax and
its probability) and the streams that chain the next ones.

Proposal (`propose`, scheduling thread; no step is in flight, speculation turns async scheduling off): draft
j >= 2 is the MTP layer (depth 0 reused, as DeepSeek chains one MTP layer) at the next position over its
previous output streams and draft j - 1. Those calls write rows at draft positions; they go into a private
copy of the rows the chain reads (the MTP layer's last `lookback` positions), never into the shared pool, so
no draft row is ever read by a later step: the next catch-up writes the real rows of the accepted positions.

Prefix hits and forks share the blocks, and with them the MTP rows. The row at position p encodes token p + 1:
a hit of h tokens restores row h - 1 as the caching sequence wrote it, exact when the new sequence's token h
is the same (the same prompt again, prefixes that diverge inside a block, every fork) and one stale row
(drafts may degrade; verification keeps the output exact) when two prompts diverge exactly at h. Bounded
replay (session cache) recomputes MTP rows from where the main rows are recomputed.

Confidences: the MTP probability of its own token, calibrated per (probability bin, position) by verified
drafts (`BinCalibration`, prior the bin centre), so `num_speculative_tokens="auto"` can weigh them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from recipe.engine.layers.v4_attention import SLIDING
from recipe.engine.layers.v4_kv import REPLAY_BOUNDS, PagedRows, V4Plan, V4Span
from recipe.engine.models.deepseek_v4_layer import WINDOW
from recipe.engine.sequence import Sequence
from recipe.engine.speculative.calibration import BinCalibration
from recipe.engine.speculative.chain_budget import ChainBudget, chain_on
from recipe.engine.speculative.drafter import Draft
from recipe.engine.step import PreparedStep, StepResult


@dataclass
class Ready:
    """A sequence's state after its last step: position p computed, token p + 1 known (its last token)."""

    position: int
    next_id: int
    streams: torch.Tensor  # [hc, D]: the MTP layer's output at p
    token: int  # first draft: argmax of the MTP logits at p
    prob: float


class MTPDrafter:
    def __init__(self, model: Any, *, block_size: int, batched: bool, max_len: int = 16) -> None:
        self.model = model
        self.attn = model.mtp[0].block.self_attn
        self.block_size, self.batched = block_size, batched
        self.calibration = BinCalibration(max_len)
        self.ready: dict[int, Ready] = {}  # seq_id -> state after its last step
        self.min_survival = 0.0  # as the head drafter's: the chain stops once every row's survival is below
        self.chain: ChainBudget | None = None  # as the head drafter's: replaces `min_survival` when set

    # ----- catch-up (model thread) ------------------------------------------------------------------------
    @torch.inference_mode()
    def after_step(self, step: PreparedStep, result: StepResult) -> None:
        """Write the MTP rows of the step's positions whose next token is known; keep each sampled sequence's
        first draft."""
        streams = self.model.last_streams
        if streams is None or result.input_ids is None:
            return
        input_ids = result.input_ids
        dev = streams.device
        tables = {k: torch.from_numpy(t).to(dev) for k, t in (step.kind_tables or {}).items() if k != REPLAY_BOUNDS}
        bounds = None if step.kind_tables is None or REPLAY_BOUNDS not in step.kind_tables else \
            step.kind_tables[REPLAY_BOUNDS].tolist()
        sample_of = {flat: r for r, flat in enumerate(step.sample_rows)}
        flat_rows: list[int] = []
        follow: list[int] = []
        positions: list[int] = []
        spans: list[V4Span] = []
        last_rows: list[int] = []  # batch row of each sampled span's last position
        owners: list[int] = []  # its seq_id
        flat0 = 0
        for b, (q, c) in enumerate(zip(step.query_lens, step.context_lens, strict=True)):
            pos0, ids = c - q, input_ids[flat0 : flat0 + q].tolist()
            r = sample_of.get(flat0 + q - 1)
            dead = r is not None and bool(result.dead_end and result.dead_end[r])
            if r is None:  # a prefill chunk: the token after it is known
                nxt = step.next_ids[b] if step.next_ids else -1
                after = ids[1:] + ([nxt] if nxt >= 0 else [])
            else:  # inputs up to the drafts, then what was emitted (a dead end: no token after its accepted drafts)
                drafted = len(step.draft_ids[r]) if step.draft_ids else 0
                if result.emitted is not None:
                    emitted = list(result.emitted[r])
                else:
                    emitted = [] if dead else [result.token_ids[r]]
                after = ids[1 : q - drafted] + emitted
                self.ready.pop(step.sample_seq_ids[r], None)
            m = len(after)
            if m:
                window_from, compressed_until = (0, 0) if bounds is None else bounds[b]
                start = len(follow)
                spans.append(V4Span(start, start + m, pos0, {k: t[b] for k, t in tables.items()},
                                    max(0, window_from), max(0, compressed_until)))
                flat_rows += range(flat0, flat0 + m)
                follow += after
                positions += range(pos0, pos0 + m)
                if r is not None and not dead:
                    last_rows.append(start + m - 1)
                    owners.append(step.sample_seq_ids[r])
            flat0 += q
        if not spans:
            return
        logits, out = self.model.mtp_forward(
            streams.index_select(0, torch.tensor(flat_rows, device=dev)), torch.tensor(follow, device=dev),
            torch.tensor(positions, device=dev), V4Plan(tuple(spans), self.block_size, self.batched),
            logits_rows=torch.tensor(last_rows, dtype=torch.int64, device=dev))
        if not last_rows:
            return
        prob, token = torch.softmax(logits, dim=-1).max(dim=-1)
        kept = out[last_rows].clone()
        for i, (seq_id, row) in enumerate(zip(owners, last_rows, strict=True)):
            self.ready[seq_id] = Ready(positions[row], follow[row], kept[i], int(token[i]), float(prob[i]))

    # ----- proposal (scheduling thread) -------------------------------------------------------------------
    def _valid(self, seq: Sequence) -> Ready | None:
        r = self.ready.get(seq.seq_id)
        if r is None or r.position != len(seq.token_ids) - 2 or r.next_id != seq.token_ids[-1]:
            return None
        return r

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], max_lens: list[int]) -> list[Draft]:
        keep = {s.seq_id for s in seqs}
        self.ready = {k: v for k, v in self.ready.items() if k in keep}
        out = [Draft() for _ in seqs]
        picked = [(i, e) for i, (s, n) in enumerate(zip(seqs, max_lens, strict=True))
                  if n > 0 and (e := self._valid(s)) is not None]
        if not picked:
            return out
        entries = [e for _, e in picked]
        tokens = [[e.token for e in entries]]
        probs = [[e.prob for e in entries]]
        survival = self.calibration.survive([1.0] * len(entries), 0, probs[0])
        longest = max(max_lens[i] for i, _ in picked)
        if longest > 1 and chain_on(self.chain, self.min_survival, self.calibration, survival, 0):
            self._chain([seqs[i] for i, _ in picked], entries, longest, tokens, probs, survival)
        for r, (i, _) in enumerate(picked):
            n = min(max_lens[i], len(tokens))
            out[i] = self.calibration.draft([tokens[j][r] for j in range(n)], [probs[j][r] for j in range(n)])
        return out

    def _chain(self, seqs: list[Sequence], entries: list[Ready], longest: int, tokens: list[list[int]],
               probs: list[list[float]], survival: list[float]) -> None:
        """Drafts 2..longest, appended to `tokens` / `probs`, over a private copy of the rows they read."""
        main = self.attn.window_rows
        assert main is not None
        dev = entries[0].streams.device
        private, tables = self._private_rows(main, seqs, [r.position for r in entries], longest)
        pos = torch.tensor([r.position for r in entries], device=dev)
        h = torch.stack([r.streams for r in entries])
        x = torch.tensor(tokens[0], device=dev)
        self.attn.window_rows = private
        try:
            for j in range(1, longest):
                plan = V4Plan(tuple(V4Span(r, r + 1, int(pos[r]) + j, {WINDOW: t}) for r, t in enumerate(tables)),
                              self.block_size, self.batched)
                logits, h = self.model.mtp_forward(h, x, pos + j, plan)
                p, x = torch.softmax(logits, dim=-1).max(dim=-1)
                tokens.append(x.tolist())
                probs.append(p.tolist())
                survival[:] = self.calibration.survive(survival, j, probs[-1])
                if j + 1 < longest and not chain_on(self.chain, self.min_survival, self.calibration, survival, j):
                    break
        finally:
            self.attn.window_rows = main

    def _private_rows(self, main: PagedRows, seqs: list[Sequence], positions: list[int], longest: int
                      ) -> tuple[PagedRows, list[torch.Tensor]]:
        """A pool holding, per sequence, the blocks of positions [p + 1 - lookback, p + longest - 1] with the MTP
        rows of its held blocks copied in, and each sequence's table into it (-1 below)."""
        bs, width = main.block_size, main.flat.shape[1]
        back = self.attn.lookback
        spans = [(max(0, p + 1 - back) // bs, (p + longest - 1) // bs) for p in positions]
        pool = torch.zeros((sum(hi - lo + 1 for lo, hi in spans), bs, width), dtype=main.flat.dtype,
                           device=main.flat.device)
        private = PagedRows(pool, 0, width)
        src: list[int] = []
        dst: list[int] = []
        tables, nxt = [], 0
        for seq, p, (lo, hi) in zip(seqs, positions, spans, strict=True):
            table = torch.full((hi + 1,), -1, dtype=torch.int64)
            table[lo:] = torch.arange(nxt, nxt + hi - lo + 1)
            for blk in range(lo, p // bs + 1):
                held = seq.block_table[blk]
                if held >= 0:  # a replaying sequence may hold no block there: its rows read as zeros
                    src += range(held * bs, held * bs + bs)
                    dst += range((nxt + blk - lo) * bs, (nxt + blk - lo + 1) * bs)
            nxt += hi - lo + 1
            tables.append(table.to(pool.device))
        if src:
            idx = torch.tensor(dst, device=pool.device)
            private.flat.index_copy_(0, idx, main.flat.index_select(0, torch.tensor(src, device=pool.device)))
        return private, tables

    def observe(self, draft: Draft, num_accepted: int) -> None:
        self.calibration.observe(draft, num_accepted)


def load_mtp_drafter(model: Any, *, block_size: int, batched: bool) -> MTPDrafter:
    """The drafter over `model`'s first MTP layer (ValueError when it has none); `batched`: the runner's
    attention backend is "batched"."""
    layers = getattr(model, "mtp", None)
    if not layers:
        raise ValueError(
            f"speculative='mtp' needs a checkpoint with multi-token-prediction layers; this {type(model).__name__} "
            "has none (DeepSeek-V4 checkpoints carry them as mtp.* tensors; checkpoints written by transformers do "
            "not, and DeepSeek-V3's are not loaded by this engine)")
    kind = layers[0].block.layer_type
    if kind != SLIDING:
        raise ValueError(f"speculative='mtp' drafts with a sliding-window MTP layer (as DeepSeek-V4 ships it); "
                         f"this checkpoint's is {kind!r}")
    return MTPDrafter(model, block_size=block_size, batched=batched)
