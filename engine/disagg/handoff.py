"""The engine's two halves of the prefill -> decode hand-off (one engine class; the worker's role picks the half).

Prefill half (`add_prefill`, `_finish`, `take_handoffs`): a handed-off request runs with `max_tokens=1`;
when a choice finishes after its first token, and would have gone on, its blocks are read out of the KV
pool before they are freed: choice 0 from the decode side's `skip_blocks` on, a later choice from the blocks
it shares with choice 0 (the same fork rule as the scheduler's). Once every choice has finished, the
request's payload goes to the transport and a `Handoff` is ready; the first-token outputs of continuing
choices are reported as not finished.

Decode half (`reserve`, `install`): the decode worker allocates first. `reserve` makes the sequences and
gives each its blocks for prompt + first token (choice 0 reuses what the prefix cache holds, by chained
hash; later choices share choice 0's leading blocks), or answers None when the pool cannot: the router
waits, which is the back-pressure. `install` writes the payload into the reserved blocks, appends each
choice's first token, replays it into a fresh constraint matcher, registers the full blocks in the prefix
cache, and puts the sequences straight into the running queue with the prompt computed.

Sampler state needs no transfer: seeded rows derive their noise from (seed, choice, position). Stop strings
are matched above the engine (the server's pipeline, which sees the whole stream through the router).

A model with several cache kinds (DeepSeek-V4: window and compressed pools) has no hand-off: its engine
serves only as a `both` worker (whole requests), where the sliding-window session cache works as in one
engine (`hands_off` is False; the hand-off halves refuse).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from recipe.engine.block_manager import BlockManager
from recipe.engine.disagg.messages import Handoff, SeqHandoff
from recipe.engine.disagg.transport import Transport
from recipe.engine.llm_engine import LLMEngine
from recipe.engine.outputs import RequestOutput
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.sequence import Sequence, SequenceStatus

NO_HAND_OFF = ("prefill and decode workers hand off one KV pool; a model with several cache kinds (DeepSeek-V4) "
               "is served by both-role workers only (--both-workers)")


@dataclass
class _PrefillJob:
    params: SamplingParams  # as the client asked (the engine runs it with max_tokens=1)
    skip_blocks: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    seqs: list[SeqHandoff] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    capture_s: float = 0.0
    cached_tokens: int = 0


class HandoffEngine(LLMEngine):
    """`LLMEngine` plus both hand-off halves (see the module docstring)."""

    def __init__(self, model: Any = "smollm2", **config: Any) -> None:
        super().__init__(model, **config)
        self.hands_off = self.runner.kv_cache is not None and hasattr(self.block_manager, "cached")
        self._jobs: dict[str, _PrefillJob] = {}
        self._ready: list[Handoff] = []
        self._going_on: set[tuple[str, int]] = set()  # (request, choice) whose first-token output is not final
        self.reserved: dict[str, list[Sequence]] = {}
        self.transport: Transport | None = None

    def require_hand_off(self) -> None:
        if not self.hands_off:
            raise ValueError(NO_HAND_OFF)

    # ----- prefill half ---------------------------------------------------------------------------------
    def add_prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams, skip_blocks: int) -> None:
        self.require_hand_off()
        self.add_request(request_id, prompt_ids, dataclasses.replace(params, max_tokens=1))
        self._jobs[request_id] = _PrefillJob(params, skip_blocks)

    def continues(self, seq: Sequence, reason: str) -> bool:
        """Whether a choice that just ended on the prefill side goes on to decode."""
        job = self._jobs.get(seq.request_id)
        return (job is not None and reason == "length" and job.params.max_tokens > 1
                and len(seq.token_ids) < self.max_model_len)

    def _finish(self, seq: Sequence, reason: str) -> None:
        job = self._jobs.get(seq.request_id)
        if job is not None and not seq.is_finished:
            self._capture(job, seq, reason)
        super()._finish(seq, reason)
        if job is not None and len(job.seqs) + len(job.ended) == job.params.n:
            self._complete(seq.request_id, job)

    def _capture(self, job: _PrefillJob, seq: Sequence, reason: str) -> None:
        t0 = time.perf_counter()
        bs = self.block_manager.block_size
        p = seq.num_prompt_tokens
        last = (p + bs - 1) // bs
        job.cached_tokens = max(job.cached_tokens, seq.num_cached_tokens)
        # choice 0's blocks carry the prompt for every choice: captured even when choice 0 itself ends here
        first = job.skip_blocks if seq.index == 0 else (p - 1) // bs
        if seq.index == 0 or self.continues(seq, reason):
            kv = self.runner.kv_cache
            assert kv is not None and len(seq.block_table) >= last, seq
            ids = seq.block_table[first:last]
            for kind in kv.tensors:
                data = kv.read(kind, ids).contiguous()
                job.arrays[f"{seq.index}/{kind}"] = data.reshape(-1).view(torch.uint8).numpy()
        if self.continues(seq, reason):
            self._going_on.add((seq.request_id, seq.index))
            job.seqs.append(SeqHandoff(seq.index, seq.token_ids[-1], first, last - first, (seq.token_ids[-1],)))
        else:
            job.ended.append(seq.index)
        job.capture_s += time.perf_counter() - t0

    def _complete(self, request_id: str, job: _PrefillJob) -> None:
        del self._jobs[request_id]
        if not job.seqs:
            return
        t0 = time.perf_counter()
        assert self.transport is not None, "a prefill worker needs a transport"
        payload = self.transport.put(job.arrays)
        nbytes = sum(a.nbytes for a in job.arrays.values())
        self._ready.append(Handoff(request_id, tuple(sorted(job.seqs, key=lambda s: s.index)), tuple(sorted(job.ended)),
                                   payload, job.cached_tokens, nbytes, job.capture_s + time.perf_counter() - t0,
                                   job.skip_blocks))

    def take_handoffs(self) -> list[Handoff]:
        ready, self._ready = self._ready, []
        return ready

    def rewrite(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        """First-token outputs of choices that go on to decode are not final."""
        out = []
        for o in outputs:
            if o.finished and (o.request_id, o.index) in self._going_on:
                self._going_on.discard((o.request_id, o.index))
                o = dataclasses.replace(o, finished=False, finish_reason=None)
            out.append(o)
        return out

    # ----- decode half ----------------------------------------------------------------------------------
    def reserve(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> int | None:
        """Allocate every choice's blocks for prompt + first token; the leading blocks held (by chained hash),
        or None (nothing changed) when the pool cannot supply them now."""
        self.require_hand_off()
        ids = self.validate(prompt_ids, params)
        if request_id in self.reserved or request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        bm = self.block_manager
        assert isinstance(bm, BlockManager)
        seqs = [Sequence(request_id, i, ids, params) for i in range(params.n)]
        held = bm.match_prefix(seqs[0]) or []
        shared = (len(ids) - 1) // bm.block_size
        need = bm.blocks_needed(len(ids) + 1)
        fresh = need - len(held) + (params.n - 1) * (need - shared)
        if fresh > bm.num_free_blocks - sum(1 for b in held if bm.blocks[b].ref_count == 0):
            return None
        ok = bm.admit(seqs[0], held, len(ids) + 1)
        for seq in seqs[1:]:
            ok = ok and bm.admit(seq, seqs[0].block_table[:shared], len(ids) + 1)
        assert ok, "reserve: the pool check and admit disagree"
        self.reserved[request_id] = seqs
        return len(held)

    def release(self, request_id: str) -> bool:
        """Give back a reservation that will not be installed (abort, failed prefill)."""
        seqs = self.reserved.pop(request_id, None)
        if seqs is None:
            return False
        for seq in reversed(seqs):
            self.block_manager.free_sequence(seq)
            seq.status = SequenceStatus.FINISHED
            seq.finish_reason = "abort"
        return True

    def install(self, handoff: Handoff, arrays: dict[str, np.ndarray]) -> int:
        """Write the payload into the reserved blocks and start decoding; returns the blocks written."""
        seqs = self.reserved.pop(handoff.request_id)
        kv = self.runner.kv_cache
        assert kv is not None
        bm = self.block_manager
        now = time.perf_counter()
        written = 0
        going = {s.index: s for s in handoff.seqs}
        bs = bm.block_size
        for seq in seqs:  # choice 0's blocks are written even if it ended: later choices share them
            if f"{seq.index}/{next(iter(kv.tensors))}" not in arrays:
                continue
            last = (seq.num_prompt_tokens + bs - 1) // bs
            first = handoff.skip_blocks if seq.index == 0 else (seq.num_prompt_tokens - 1) // bs
            block_ids = seq.block_table[first:last]
            for kind, t in kv.tensors.items():
                shape = (t.shape[0], t.shape[1], len(block_ids), *t.shape[3:])
                data = torch.from_numpy(arrays[f"{seq.index}/{kind}"]).view(t.dtype).reshape(shape)
                kv.write(kind, block_ids, data)
            written += len(block_ids)
        for seq in seqs:
            h = going.get(seq.index)
            if h is None:
                bm.free_sequence(seq)
                seq.status = SequenceStatus.FINISHED
                seq.finish_reason = "prefill"
                continue
            seq.token_ids.append(h.first_token)
            seq.token_times.append(now)
            if seq.matcher is not None:
                for token in h.replay_ids:
                    accepted = seq.matcher.accept(token)
                    assert accepted is not False, "the constraint matcher refused a token prefill accepted"
            seq.num_computed_tokens = seq.num_prompt_tokens
            seq.num_cached_tokens = handoff.cached_tokens
            seq.scheduled_time = now
            seq.status = SequenceStatus.RUNNING
            bm.commit(seq)
            self.scheduler.running.append(seq)
            self._first_token_time[seq.seq_id] = now
            self.output_tokens += 1
        live = [s for s in seqs if not s.is_finished]
        if live:
            self.requests[handoff.request_id] = live
        return written

    def abort_request(self, request_id: str) -> list[RequestOutput]:
        self._jobs.pop(request_id, None)
        self._going_on = {k for k in self._going_on if k[0] != request_id}
        self.release(request_id)
        return super().abort_request(request_id)
