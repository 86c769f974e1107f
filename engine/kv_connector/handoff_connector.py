"""Prefill -> decode hand-off as a KV connector: one class, both ends (the worker's role picks the half).

Prefill end (`add_prefill`, `request_finished`, `build_connector_meta`, `rewrite`): a handed-off request runs
with `max_tokens=1`; when a choice finishes after its first token, and would have gone on, its blocks of
every cache kind are saved before they are freed: choice 0 from the decode side's `skip_blocks` on, a later
choice from the blocks it shares with choice 0 (the same fork rule as the scheduler's). Once every choice
has finished, the payload goes to the transport and a `Handoff` is ready; the first-token outputs of
continuing choices are reported as not finished.

Decode end (`reserve`, `install`, `release`): the decode worker allocates first. `reserve` makes the
sequences and gives each its blocks for prompt + first token (choice 0 reuses what the prefix cache holds,
by chained hash; later choices share choice 0's leading blocks), or answers None when the pool cannot: the
router waits, which is the back-pressure. `install` writes the payload into the reserved blocks (window
blocks the prefill side had released are released here too), appends each choice's first token, replays it
into a fresh constraint matcher, and hands the sequences to the engine to decode with the prompt computed.

Sampler state needs no transfer: seeded rows derive their noise from (seed, choice, position). Stop strings
are matched above the engine (the server's pipeline, which sees the whole stream through the router).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
from recipe.engine.disagg.handoff_descriptor import Handoff, SeqHandoff
from recipe.engine.disagg.transport_protocol import Transport
from recipe.engine.kv_connector.base import KVConnector
from recipe.engine.kv_connector.kv_payload import load_blocks, save_blocks
from recipe.engine.outputs import RequestOutput
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.sequence import Sequence, SequenceStatus

NO_HAND_OFF = ("prefill and decode workers copy KV blocks by cache kind; this model's layers keep caches the "
               "engine cannot copy (serve it with both-role workers only, --both-workers)")
NO_HAND_OFF_SESSIONS = ("the sliding-window session cache rebuilds windows by bounded replay, which a hand-off "
                        "has no step for: serve it with both-role workers only (--both-workers)")


@dataclass
class _PrefillJob:
    params: SamplingParams  # as the client asked (the engine runs it with max_tokens=1)
    skip_blocks: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    seqs: list[SeqHandoff] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    capture_s: float = 0.0
    cached_tokens: int = 0


class HandoffConnector(KVConnector):
    """Both ends of the hand-off (see the module docstring); `transport` carries the prefill end's payloads."""

    def __init__(self, transport: Transport | None = None) -> None:
        self.transport = transport
        self._jobs: dict[str, _PrefillJob] = {}
        self._ready: list[Handoff] = []
        self._going_on: set[tuple[str, int]] = set()  # (request, choice) whose first-token output is not final
        self.reserved: dict[str, list[Sequence]] = {}
        self._skip: dict[str, int] = {}  # reserved request -> choice 0's tokens the decode side held

    @property
    def hands_off(self) -> bool:
        return self.engine.kv_blocks is not None and self.engine.swa_sessions is None

    def require_hand_off(self) -> None:
        if self.engine.kv_blocks is None:
            raise ValueError(NO_HAND_OFF)
        if self.engine.swa_sessions is not None:
            raise ValueError(NO_HAND_OFF_SESSIONS)

    def _skip_tokens(self, seq: Sequence, skip_blocks: int) -> int:
        """Choice 0 skips what the decode side held; a later choice what it shares with choice 0."""
        bs = self.engine.block_manager.block_size
        return skip_blocks * bs if seq.index == 0 else (seq.num_prompt_tokens - 1) // bs * bs

    # ----- prefill end: scheduler half ------------------------------------------------------------------
    def add_prefill(self, request_id: str, prompt_ids: list[int], params: SamplingParams, skip_blocks: int) -> None:
        self.require_hand_off()
        self.engine.add_request(request_id, prompt_ids, dataclasses.replace(params, max_tokens=1))
        self._jobs[request_id] = _PrefillJob(params, skip_blocks)

    def continues(self, seq: Sequence, reason: str) -> bool:
        """Whether a choice that just ended on the prefill side goes on to decode."""
        job = self._jobs.get(seq.request_id)
        return (job is not None and reason == "length" and job.params.max_tokens > 1
                and len(seq.token_ids) < self.engine.max_model_len)

    def request_finished(self, seq: Sequence, reason: str) -> bool:
        job = self._jobs.get(seq.request_id)
        if job is None or seq.is_finished:
            return False
        t0 = time.perf_counter()
        going = self.continues(seq, reason)
        job.cached_tokens = max(job.cached_tokens, seq.num_cached_tokens)
        # choice 0's blocks carry the prompt for every choice: saved even when choice 0 itself ends here
        if seq.index == 0 or going:
            skip = self._skip_tokens(seq, job.skip_blocks)
            job.arrays.update(self.save_kv(seq, skip, seq.num_prompt_tokens))
        if going:
            self._going_on.add((seq.request_id, seq.index))
            bm = self.engine.block_manager
            first, count = bm.complete_blocks(bm.kinds[0], skip), len(job.arrays[f"{seq.index}/{bm.kinds[0]}/at"])
            job.seqs.append(SeqHandoff(seq.index, seq.token_ids[-1], first, count, (seq.token_ids[-1],)))
        else:
            job.ended.append(seq.index)
        job.capture_s += time.perf_counter() - t0
        if len(job.seqs) + len(job.ended) == job.params.n:
            self._complete(seq.request_id, job)
        return going

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

    def build_connector_meta(self) -> list[Handoff]:
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

    # ----- decode end: scheduler half -------------------------------------------------------------------
    def get_num_new_matched_tokens(self, seq: Sequence, num_local_tokens: int) -> int:
        return seq.num_prompt_tokens - num_local_tokens  # the prefill side computed the whole prompt

    def update_state_after_alloc(self, seqs: list[Sequence], num_local_tokens: int) -> None:
        self.reserved[seqs[0].request_id] = seqs
        self._skip[seqs[0].request_id] = num_local_tokens

    def reserve(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> int | None:
        """Allocate every choice's blocks for prompt + first token; the leading blocks held (by chained hash),
        or None (nothing changed) when the pool cannot supply them now."""
        self.require_hand_off()
        e = self.engine
        ids = e.validate(prompt_ids, params)
        if request_id in self.reserved or request_id in e.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        bm = e.block_manager
        seqs = [Sequence(request_id, i, ids, params) for i in range(params.n)]
        held = bm.match_prefix(seqs[0]) or []
        shared = (len(ids) - 1) // bm.block_size
        need = bm.blocks_needed(len(ids) + 1)
        if need - len(held) + (params.n - 1) * (need - shared) > bm.free_blocks_beside(held):
            return None
        admitted: list[Sequence] = []
        for seq in seqs:
            if not bm.admit(seq, held if seq.index == 0 else seqs[0].block_table[:shared], len(ids) + 1):
                for s in reversed(admitted):  # another kind's pool ran short: give back what was taken
                    bm.free_sequence(s)
                return None
            admitted.append(seq)
        assert self.get_num_new_matched_tokens(seqs[0], len(held) * bm.block_size) > 0
        self.update_state_after_alloc(seqs, len(held) * bm.block_size)
        return len(held)

    def release(self, request_id: str) -> bool:
        """Give back a reservation that will not be installed (abort, failed prefill)."""
        seqs = self.reserved.pop(request_id, None)
        self._skip.pop(request_id, None)
        if seqs is None:
            return False
        for seq in reversed(seqs):
            self.engine.block_manager.free_sequence(seq)
            seq.status = SequenceStatus.FINISHED
            seq.finish_reason = "abort"
        return True

    def install(self, handoff: Handoff, arrays: dict[str, np.ndarray]) -> int:
        """Write the payload into the reserved blocks and start decoding; returns the blocks written."""
        seqs = self.reserved.pop(handoff.request_id)
        skip0 = self._skip.pop(handoff.request_id)
        assert skip0 == handoff.skip_blocks * self.engine.block_manager.block_size, (skip0, handoff.skip_blocks)
        bm = self.engine.block_manager
        written = 0
        going = {s.index: s for s in handoff.seqs}
        slid: dict[str, list[int]] = {}  # choice 0's released positions: later choices share those blocks
        for seq in seqs:  # choice 0's blocks are written even if it ended: later choices share them
            skip = self._skip_tokens(seq, handoff.skip_blocks)
            if seq.index > 0:
                for kind, positions in slid.items():
                    bm.release_slid(seq, kind, [i for i in positions if i < bm.complete_blocks(kind, skip)])
            if f"{seq.index}/{bm.kinds[0]}" not in arrays:
                continue
            released = self.load_kv(seq, arrays, skip, seq.num_prompt_tokens)
            written += len(arrays[f"{seq.index}/{bm.kinds[0]}/at"])
            if seq.index == 0:
                slid = released
        live = []
        for seq in seqs:
            h = going.get(seq.index)
            if h is None:
                bm.free_sequence(seq)
                seq.status = SequenceStatus.FINISHED
                seq.finish_reason = "prefill"
                continue
            seq.token_ids.append(h.first_token)
            seq.token_times.append(time.perf_counter())
            if seq.matcher is not None:
                for token in h.replay_ids:
                    accepted = seq.matcher.accept(token)
                    assert accepted is not False, "the constraint matcher refused a token prefill accepted"
            seq.num_computed_tokens = seq.num_prompt_tokens
            seq.num_cached_tokens = handoff.cached_tokens
            live.append(seq)
        self.engine.resume(handoff.request_id, live)
        return written

    def request_aborted(self, request_id: str) -> None:
        self._jobs.pop(request_id, None)
        self._going_on = {k for k in self._going_on if k[0] != request_id}
        self.release(request_id)

    # ----- worker half ----------------------------------------------------------------------------------
    def save_kv(self, seq: Sequence, skip_tokens: int, num_tokens: int) -> dict[str, np.ndarray]:
        e = self.engine
        assert e.kv_blocks is not None
        return save_blocks(e.kv_blocks, e.block_manager, seq, skip_tokens, num_tokens, str(seq.index))

    def load_kv(self, seq: Sequence, arrays: dict[str, np.ndarray], skip_tokens: int,
                num_tokens: int) -> dict[str, list[int]]:
        e = self.engine
        assert e.kv_blocks is not None
        return load_blocks(e.kv_blocks, e.block_manager, seq, arrays, skip_tokens, num_tokens, str(seq.index))
