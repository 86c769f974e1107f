"""Continuous batching: which sequences run in the next step, and how many of their tokens.

Policy (first come, first served, no starvation):
1. running sequences, oldest first, each gets its remaining tokens (a decode token, or the next prefill
   chunk) while the step's token budget lasts; when blocks run out the youngest running sequence is
   preempted (its KV freed, recomputed later: the prefix cache usually serves most of it back);
2. then waiting sequences, strictly in arrival order: the head of the queue either gets in or nobody does.
   A newcomer starts from its longest cached prefix; choice `i > 0` of an `n > 1` request shares the
   full prompt blocks of choice 0 (forked once choice 0 has computed them).
A sequence samples in a step when the step reaches its last token. Under asynchronous scheduling the
token sampled in the step in flight is a placeholder (`PLACEHOLDER`) that the model runner fills in.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from recipe.engine.block_manager import BlockManager
from recipe.engine.layers.v4_kv import RELEASED
from recipe.engine.sequence import Sequence, SequenceStatus

PLACEHOLDER = -1


@dataclass
class ScheduledSequence:
    """A sequence's share of one step: tokens [start, start + num_tokens) of it (ids copied at schedule time)."""

    seq: Sequence
    start: int
    num_tokens: int
    input_ids: list[int]
    sample: bool
    block_table: list[int]
    draft_ids: list[int] = field(default_factory=list)  # speculative tokens: the last len(draft_ids) inputs


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    kv_writes: list[Callable[[], None]] = field(default_factory=list)  # restored KV, written before the step

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    def __bool__(self) -> bool:
        return bool(self.scheduled)


class Scheduler:
    def __init__(self, block_manager: BlockManager, *, max_num_seqs: int, max_num_batched_tokens: int,
                 max_model_len: int) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._starts: dict[int, int] = {}  # seq_id -> tokens computed before the step being scheduled

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def _wants_step(self, seq: Sequence) -> bool:
        """False while the only thing left is to learn whether the token in flight ends the sequence."""
        if seq.num_computed_tokens >= len(seq):
            return False  # a speculative step is in flight: its accepted length decides what comes next
        if seq.num_pending == 0:
            return True
        return seq.num_output_tokens < seq.params.max_tokens and len(seq) < self.max_model_len

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        self._starts = {}
        budget = self.max_num_batched_tokens
        bm = self.block_manager
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            i += 1
            if not self._wants_step(seq):
                continue
            n = min(len(seq) - seq.num_computed_tokens + len(seq.draft_ids), budget)
            assert n > 0, seq
            while not bm.ensure(seq, seq.num_computed_tokens + n):
                victim = self.running[-1]
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            else:
                out.scheduled.append(self._take(seq, n))
                budget -= n
        if not out.preempted:
            self._admit(out, budget)
        if out.scheduled:
            out.kv_writes = bm.take_pending_writes()
        return out

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        bm = self.block_manager
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq.num_pending:  # preempted while its last token was in flight: wait for it
                return
            prefix = self._fork_prefix(seq)
            if prefix is None:
                return
            if not prefix:
                # past the device pool the lower KV tiers load on a thread; wait for them only when idle
                prefix = bm.match_prefix(seq, wait=not self.running)
                if prefix is None:
                    return
            cached = len(prefix) * bm.block_size
            n = min(len(seq) - cached, budget)
            if not bm.admit(seq, prefix, cached + n):
                return
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            seq.num_computed_tokens = cached
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = cached
                seq.scheduled_time = time.perf_counter()
            self.running.append(seq)
            out.scheduled.append(self._take(seq, n))
            budget -= n

    def _fork_prefix(self, seq: Sequence) -> list[int] | None:
        """Choice i > 0 of an n > 1 request: the parent's full prompt blocks, [] to go alone, None to wait."""
        parent = seq.fork_parent
        if parent is None:
            return []
        bs = self.block_manager.block_size
        num_blocks = (seq.num_prompt_tokens - 1) // bs
        if num_blocks == 0 or parent.status == SequenceStatus.FINISHED:
            seq.fork_parent = None
            return []
        computed_before = self._starts.get(parent.seq_id, parent.num_computed_tokens)
        if parent.status == SequenceStatus.RUNNING and computed_before >= num_blocks * bs:
            seq.fork_parent = None
            prefix = parent.block_table[:num_blocks]
            # the parent's window slid past its prompt (several cache kinds): the rows the child reads first are
            # gone from its table; the child goes alone (the prefix cache may still hold them)
            return [] if RELEASED in prefix else prefix
        return None  # the parent has not computed its prompt yet; it is ahead in the queue

    def _take(self, seq: Sequence, n: int) -> ScheduledSequence:
        start = seq.num_computed_tokens
        self._starts[seq.seq_id] = start
        end = start + n
        known = len(seq.token_ids)
        ids = seq.token_ids[start:min(end, known)]
        drafts = seq.draft_ids[: max(0, end - len(seq))]  # the token budget may cut a draft short
        seq.draft_ids = []
        if drafts:
            assert seq.num_pending == 0 and start == known - 1, seq
            ids.extend(drafts)
        elif end > known:
            assert end == known + 1 and seq.num_pending == 1, seq
            ids.append(PLACEHOLDER)
        sample = end >= len(seq)
        seq.num_computed_tokens = end
        if sample:
            seq.num_pending += 1
        return ScheduledSequence(seq, start, n, ids, sample, list(seq.block_table), drafts)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free_sequence(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a sequence (any state) and free its blocks at once."""
        if seq.status == SequenceStatus.FINISHED:
            return
        if seq.status == SequenceStatus.RUNNING:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self.block_manager.free_sequence(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
