"""Runs one scheduled step on the model: builds the attention context, runs forward and the sampler.

`prepare` runs on the scheduling thread and copies everything it needs; `execute` runs on the model thread
(or inline in synchronous mode). A placeholder input (the token sampled by the previous step, not yet
known when this step was scheduled) is filled from the previous step's result, so the step never waits
for the host to post-process its predecessor.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from recipe.engine import device as devices
from recipe.engine.context import AttentionContext, reset_context, set_context
from recipe.engine.huge_pages import move_weights_to_huge_pages
from recipe.engine.kv_cache import BlockStore, KindPools, KVCache
from recipe.engine.layers.few_rows_linear import use_few_rows_linears
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.layers.routed_experts import RoutedExperts
from recipe.engine.sampler import Sampler, SamplerOutput, SamplingRow
from recipe.engine.scheduler import PLACEHOLDER, SchedulerOutput
from recipe.engine.speculative.verify_step import verify_step
from recipe.engine.step import PreparedStep, StepResult
from recipe.engine.step_threads import StepThreads


def kv_cache_blocks(model: Any, *, block_size: int, dtype: torch.dtype, device: torch.device,
                    num_kv_blocks: int | None, kv_cache_bytes: int | None, fraction: float, cpu_cap: int) -> int:
    """Size the block pool from the memory budget (or take `num_kv_blocks` as given)."""
    if num_kv_blocks is not None:
        return num_kv_blocks
    per_block = int(model.kv_bytes_per_block(block_size, dtype))
    assert per_block > 0
    if kv_cache_bytes is None:
        kv_cache_bytes = int(devices.free_memory_bytes(device) * fraction)
        if device.type == "cpu":
            kv_cache_bytes = min(kv_cache_bytes, cpu_cap)
    blocks = kv_cache_bytes // per_block
    if blocks < 1:
        raise ValueError(f"KV cache budget of {kv_cache_bytes} bytes holds no block of {per_block} bytes")
    return blocks


class ModelRunner:
    def __init__(self, model: Any, *, block_size: int, num_blocks: int, dtype: torch.dtype,
                 device: torch.device, attention_backend: str = "batched", weight_format: str = "dtype",
                 moe_backend: str = "grouped", kinds: Any = None, norm_backend: str = "torch",
                 decode_backend: str = "layers", linear_backend: str = "torch", huge_pages: bool = False) -> None:
        """The speed options are `EngineConfig`'s (each with its reference path as the off switch)."""
        self.model = model
        self.attention_backend = attention_backend
        if weight_format != "dtype":
            model.quantize_weights(weight_format)
        if linear_backend == "few-rows":  # engine/layers/few_rows_linear.py
            use_few_rows_linears(model)
            if hasattr(model, "few_rows_logits"):
                model.few_rows_logits = True
        if huge_pages and device.type == "cpu":  # after quantising: the weights a step reads, where they stay
            move_weights_to_huge_pages(model)
        if hasattr(model, "decode_backend"):  # models with a fused decode step (engine/kernels/fused_llama.py)
            model.decode_backend = decode_backend
        for module in model.modules():
            if isinstance(module, RoutedExperts):
                module.backend = moe_backend
            elif isinstance(module, RMSNorm):
                module.backend = norm_backend
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.device = device
        self.dtype = dtype
        self.kv_cache: KVCache | None = None  # the one owner of the KV tensors (see engine/kv_cache.py)
        if hasattr(model, "bind_kv_cache"):
            self.kv_cache = KVCache(model.cache_specs(), num_blocks, block_size, dtype, device)
            model.bind_kv_cache(self.kv_cache)
        else:  # a model that keeps its own cache (the engine tests' tiny model)
            # a model with several cache kinds (DeepSeek-V4) gets each kind's block count
            model.allocate_kv_cache(num_blocks if kinds is None else kinds.counts, block_size, dtype, device)
        self.kinds = kinds  # a multi-kind cache (DeepSeek-V4): block tables of every cache kind
        # block copies of every kind (tiers, hand-off); None for a model whose layers keep unnamed caches
        self.kv_blocks: BlockStore | None = self.kv_cache or (KindPools(model.pools) if getattr(model, "pools", None)
                                                              else None)
        self.sampler = Sampler(device)
        self._prev: dict[int, int] = {}  # seq_id -> token sampled by the previous executed step
        self.step_threads: StepThreads | None = None  # intra-op threads per step size (engine/step_threads.py)

    def prepare(self, sched: SchedulerOutput) -> PreparedStep:
        bs = self.block_size
        ids: list[int] = []
        positions: list[np.ndarray] = []
        slots: list[np.ndarray] = []
        placeholders: list[tuple[int, int]] = []
        sample_rows: list[int] = []
        sample_seq_ids: list[int] = []
        rows: list[SamplingRow] = []
        matchers: list[Any] = []
        pending_history: list[bool] = []
        drafts: list[list[int]] = []
        next_ids: list[int] = []
        max_blocks = max(len(s.block_table) for s in sched.scheduled)
        tables = np.full((len(sched.scheduled), max_blocks), -1, dtype=np.int64)
        for b, s in enumerate(sched.scheduled):
            seq = s.seq
            if s.input_ids[-1] == PLACEHOLDER:
                placeholders.append((len(ids) + s.num_tokens - 1, seq.seq_id))
            ids.extend(s.input_ids)
            pos = np.arange(s.start, s.start + s.num_tokens, dtype=np.int64)
            table = np.asarray(s.block_table, dtype=np.int64)
            tables[b, : len(table)] = table
            positions.append(pos)
            slots.append(table[pos // bs] * bs + pos % bs)
            next_ids.append(-1 if s.sample else seq.token_ids[s.start + s.num_tokens])
            if s.sample:
                sample_rows.append(len(ids) - 1)
                sample_seq_ids.append(seq.seq_id)
                p = seq.params
                known = seq.token_ids
                pending = s.input_ids[-1] == PLACEHOLDER
                rows.append(SamplingRow(
                    params=p, index=seq.index, position=s.start + s.num_tokens - len(s.draft_ids),
                    output_ids=known[seq.num_prompt_tokens:] if (p.presence_penalty or p.frequency_penalty) else None,
                    context_ids=list(known) if p.repetition_penalty != 1.0 else None,
                ))
                matchers.append(seq.matcher)
                pending_history.append(pending)
                drafts.append(s.draft_ids)
        return PreparedStep(
            input_ids=np.asarray(ids, dtype=np.int64), placeholders=placeholders,
            positions=np.concatenate(positions), slot_mapping=np.concatenate(slots),
            query_lens=[s.num_tokens for s in sched.scheduled],
            context_lens=[s.start + s.num_tokens for s in sched.scheduled],
            block_tables=tables, sample_rows=sample_rows, sample_seq_ids=sample_seq_ids, rows=rows,
            matchers=matchers, pending_history=pending_history, kv_writes=sched.kv_writes,
            kind_tables=self._kind_tables(sched), draft_ids=drafts, next_ids=next_ids,
        )

    def _kind_tables(self, sched: SchedulerOutput) -> dict[str, np.ndarray] | None:
        if self.kinds is None:
            return None
        per_seq = [self.kinds.tables_for(s.seq) for s in sched.scheduled]
        out = {}
        for kind in per_seq[0]:
            width = max(1, max(len(t[kind]) for t in per_seq))
            table = np.full((len(per_seq), width), -1, dtype=np.int64)
            for b, t in enumerate(per_seq):
                table[b, : len(t[kind])] = t[kind]
            out[kind] = table
        return out

    @torch.inference_mode()
    def execute(self, step: PreparedStep) -> StepResult:
        start = time.perf_counter()
        if self.step_threads is not None:
            threads = self.step_threads.threads_for(len(step.input_ids))
            if threads != torch.get_num_threads():
                torch.set_num_threads(threads)
        input_ids = step.input_ids
        if step.placeholders:
            input_ids = input_ids.copy()
            for flat, seq_id in step.placeholders:
                input_ids[flat] = self._prev[seq_id]
        for row, pending, flat in zip(step.rows, step.pending_history, step.sample_rows, strict=True):
            if pending:  # this row's histories miss the token that is its own input now
                tok = int(input_ids[flat])
                if row.output_ids is not None:
                    row.output_ids = [*row.output_ids, tok]
                if row.context_ids is not None:
                    row.context_ids = [*row.context_ids, tok]
        for write in step.kv_writes:  # blocks restored from lower KV tiers, before anything reads them
            write()
        dev = self.device
        cu = np.zeros(len(step.query_lens) + 1, dtype=np.int64)
        np.cumsum(step.query_lens, out=cu[1:])
        set_context(AttentionContext(
            query_lens=step.query_lens, context_lens_list=step.context_lens,
            cu_seqlens_q=torch.from_numpy(cu).to(dev),
            context_lens=torch.tensor(step.context_lens, dtype=torch.int64, device=dev),
            slot_mapping=torch.from_numpy(step.slot_mapping).to(dev),
            block_tables=torch.from_numpy(step.block_tables).to(dev),
            block_size=self.block_size, attention_backend=self.attention_backend,
            kind_tables=None if step.kind_tables is None else
            {k: torch.from_numpy(t).to(dev) for k, t in step.kind_tables.items()},
        ))
        try:
            hidden = self.model.forward(torch.from_numpy(input_ids).to(dev), torch.from_numpy(step.positions).to(dev))
        finally:
            reset_context()
        result = self._sample(step, hidden, start)
        result.input_ids = input_ids
        return result

    def _sample(self, step: PreparedStep, hidden: torch.Tensor, start: float) -> StepResult:
        dev = self.device
        if not step.rows:
            devices.synchronize(dev)
            return StepResult([], [], [], start, time.perf_counter(), [])
        if any(step.draft_ids):
            return verify_step(self, step, hidden, start)
        # a copy (StepResult.hidden keeps it): the next forward may reuse `hidden`'s memory
        rows_hidden = hidden[torch.tensor(step.sample_rows, device=dev)]
        logits = self.model.compute_logits(rows_hidden)
        bitmask, dead_end = self._bitmask(step.matchers, logits.shape[1])
        out: SamplerOutput = self.sampler(logits, step.rows, bitmask)
        terminated = [False] * len(step.rows)
        for i, matcher in enumerate(step.matchers):
            if matcher is None or dead_end[i] or matcher.is_terminated():
                continue
            if matcher.accept(out.token_ids[i]) is False:
                dead_end[i] = True  # the matcher refused the token: it is never emitted
            else:
                terminated[i] = bool(matcher.is_terminated())
        self._prev = dict(zip(step.sample_seq_ids, out.token_ids, strict=True))
        return StepResult(out.token_ids, out.logprobs, terminated, start, time.perf_counter(), dead_end,
                          hidden=rows_hidden)

    @staticmethod
    def _bitmask(matchers: list[Any], vocab_size: int) -> tuple[torch.Tensor | None, list[bool]]:
        """The packed allowed-token mask of each row (None when no row is constrained), and which rows are
        at a dead end: a live matcher that allows no token at all.

        The sampler only ever sees rows that allow something: a row without a live matcher is all ones
        (a finished matcher's sequence has ended; its token is discarded), and a dead-end row is set to all
        ones too, because its sequence ends here without a token (`StepResult.dead_end`).
        """
        dead_end = [False] * len(matchers)
        if all(m is None for m in matchers):
            return None, dead_end
        words = (vocab_size + 31) // 32
        mask = np.full((len(matchers), words), -1, dtype=np.int32)
        live = [None if m is None or m.is_terminated() else m for m in matchers]
        batch_fill = _batch_filler(live)
        if batch_fill is not None:
            batch_fill(live, mask)  # the constraint layer fills rows in parallel (equal to one by one)
        else:
            for i, matcher in enumerate(live):
                if matcher is not None:
                    matcher.fill_bitmask(mask[i])
        if vocab_size % 32:  # bits past the vocabulary allow nothing
            mask[:, -1] &= np.int32(np.uint32((1 << (vocab_size % 32)) - 1).view(np.int32))
        for i, matcher in enumerate(live):
            if matcher is not None and not mask[i].any():
                dead_end[i] = True
                mask[i] = -1
        return torch.from_numpy(mask), dead_end


def _batch_filler(matchers: list[Any]) -> Any:
    """`recipe.constraints.batch.fill_bitmasks` when every live matcher comes from the constraint layer."""
    try:
        from recipe.constraints.backend import Matcher
        from recipe.constraints.batch import fill_bitmasks
    except ImportError:
        return None
    live = [m for m in matchers if m is not None]
    return fill_bitmasks if live and all(isinstance(m, Matcher) for m in live) else None
