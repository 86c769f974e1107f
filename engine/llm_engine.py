"""The engine loop: add requests, `step()` them, collect output deltas. `LLMEngine` is the colocated
`core.EngineCore`: one model in this process.

The model runs on its own thread (the "model thread") in both modes. In asynchronous mode
(`async_scheduling=True`, the default) `step()` schedules and prepares step N+1 and submits it while step N
runs, then post-processes step N while N+1 runs, so the CPU work of scheduling and post-processing hides
behind the model; in synchronous mode each step waits for its own result. Tokens are identical in
both modes; a sequence that ends in step N may take part in step N+1, whose result for it is dropped.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from recipe.engine import device as devices
from recipe.engine.block_manager import BlockManager
from recipe.engine.config import EngineConfig
from recipe.engine.core import EngineStats  # re-exported: callers import it from here
from recipe.engine.kv_cache import BlockStore
from recipe.engine.kv_connector.base import KVConnector
from recipe.engine.kv_kinds import TIERS_NEED_SESSIONS
from recipe.engine.kv_manager import build_kv_manager
from recipe.engine.linear_census import census_note
from recipe.engine.model_runner import ModelRunner, kv_cache_blocks
from recipe.engine.outputs import RequestOutput, RequestTiming
from recipe.engine.prompt_check import check_prompt
from recipe.engine.sampling_params import SamplingParams
from recipe.engine.scheduler import Scheduler, SchedulerOutput
from recipe.engine.sequence import Sequence, SequenceStatus
from recipe.engine.step import PreparedStep, StepObserver, StepResult


def load(model: Any, dtype: Any, device: Any, weight_format: str = "dtype") -> tuple[Any, Any]:
    """(model, ModelInfo) from a registered name or path, or as given when already a (model, info) pair."""
    if isinstance(model, tuple):
        return model
    from recipe.engine.models.registry import load_model

    return load_model(model, dtype=dtype, device=device, weight_format=weight_format)


class LLMEngine:
    def __init__(self, model: Any = "smollm2", connector: KVConnector | None = None, **config: Any) -> None:
        """`connector`: moves requests' KV to or from another engine (`engine/kv_connector`), or None."""
        self.config = EngineConfig.from_kwargs(model if isinstance(model, str) else "<given>", **config)
        cfg = self.config
        self.device = devices.resolve(cfg.checkpoint.device)
        self.dtype = devices.parse_dtype(cfg.checkpoint.dtype)
        self.num_threads = devices.set_num_threads(cfg.kernels.num_threads)
        self.model, self.model_info = load(model, self.dtype, self.device, cfg.kernels.weight_format)
        num_blocks = kv_cache_blocks(
            self.model, block_size=cfg.kv.block_size, dtype=self.dtype, device=self.device,
            num_kv_blocks=cfg.kv.num_kv_blocks, kv_cache_bytes=cfg.kv.kv_cache_bytes, fraction=cfg.kv.kv_cache_fraction,
            cpu_cap=cfg.kv.kv_cache_max_bytes)
        context = int(getattr(self.model_info, "context_length", 0) or 1 << 30)
        self.max_model_len = min(cfg.checkpoint.max_model_len or context, num_blocks * cfg.kv.block_size)
        self.vocab_size = int(self.model_info.vocab_size)
        self.eos_token_ids = frozenset(int(t) for t in self.model_info.eos_token_ids)
        specs = self.model.cache_specs() if hasattr(self.model, "cache_specs") else []
        self.block_manager: BlockManager = build_kv_manager(
            specs, num_blocks, cfg.kv.block_size, cfg.kv.enable_prefix_caching, cfg.scheduler.max_num_seqs,
            cfg.kv.release_window_blocks)
        # several cache kinds (DeepSeek-V4): the runner, session cache and tiers read every kind's tables
        kinds = self.block_manager if self.block_manager.per_kind_tables else None
        self.scheduler = Scheduler(self.block_manager, max_num_seqs=cfg.scheduler.max_num_seqs,
                                   max_num_batched_tokens=cfg.scheduler.max_num_batched_tokens,
                                   max_model_len=self.max_model_len)
        # None: the model's own default (DeepSeek-V4: "batched"), else the per-sequence reference
        self.attention_backend = str(cfg.kernels.attention_backend or getattr(self.model, "default_attention_backend",
                                                                       "reference"))
        self.runner = ModelRunner(self.model, block_size=cfg.kv.block_size, num_blocks=num_blocks,
                                  dtype=self.dtype, device=self.device, attention_backend=self.attention_backend,
                                  weight_format=cfg.kernels.weight_format, moe_backend=cfg.kernels.moe_backend,
                                  kinds=kinds, norm_backend=cfg.kernels.norm_backend,
                                  decode_backend=cfg.kernels.decode_backend, linear_backend=cfg.kernels.linear_backend,
                                  huge_pages=cfg.kernels.huge_pages)
        self.swa_sessions: Any = None
        if cfg.session.swa_session_bytes is not None:
            if kinds is None:
                raise ValueError("swa_session_bytes needs a model with a sliding-window cache (DeepSeek-V4)")
            from recipe.engine.window_sessions import WindowSessions

            self.swa_sessions = kinds.sessions = WindowSessions.from_config(cfg, self.model)
        self.kv_tiers: Any = None
        if cfg.kv.kv_tiers_enabled:
            from recipe.engine.kv_tiers import KVTiers

            if kinds is None:
                self.kv_tiers = KVTiers.from_config(cfg, self.model, self.model_info, self.dtype,
                                                    getattr(self.runner, "kv_cache", None))
            else:  # one tier stack per cache kind; window state only at the session cache's grain
                from recipe.engine.kv_tiers.kind_tiers import KindTiers

                if self.swa_sessions is None:
                    raise ValueError(TIERS_NEED_SESSIONS)
                s = self.swa_sessions
                window = s.rows / s.grain if cfg.session.swa_persist_window else 0.0
                self.kv_tiers = KindTiers.from_config(cfg, self.model, self.model_info, self.dtype, window)
            self.block_manager.tiers = self.kv_tiers
        # The model always runs on this one thread (so both modes run it alike); only async mode overlaps.
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            1, thread_name_prefix="recipe-model", initializer=devices.set_num_threads, initargs=(self.num_threads,))
        if cfg.kernels.step_threads == "auto" and self.num_threads > 1 and self.device.type == "cpu":
            from recipe.engine.step_threads import profile_step_threads

            self.runner.step_threads = self._executor.submit(lambda: profile_step_threads(
                self.runner, num_threads=self.num_threads, max_seqs=cfg.scheduler.max_num_seqs,
                max_tokens=cfg.scheduler.max_num_batched_tokens)).result()
        self.speculator: Any = None
        if cfg.spec.speculative is not None:
            from recipe.engine.speculative import build_speculator

            self.speculator = build_speculator(
                cfg, model=self.model, runner=self.runner, block_manager=self.block_manager,
                run_on_model_thread=lambda fn: self._executor.submit(fn).result(),  # type: ignore[union-attr]
                max_model_len=self.max_model_len, vocab_size=self.vocab_size)
        # read each step on the model thread before the next one runs (the drafter, through the speculator)
        self.step_observers: list[StepObserver] = [] if self.speculator is None else [self.speculator]
        # Speculation drafts from each sequence's last token and the next step's positions depend on how many
        # drafts a verify step accepts: a verify step runs alone (no overlap), and a step that drafts first waits
        # for the step in flight. Steps that draft nothing overlap as without speculation (`speculative_async`;
        # off: every step waits for its predecessor).
        self.async_scheduling = cfg.scheduler.async_scheduling and (self.speculator is None or cfg.spec.speculative_async)
        self._inflight: deque[tuple[SchedulerOutput, Future[StepResult]]] = deque()
        self.requests: dict[str, list[Sequence]] = {}
        self._first_token_time: dict[int, float] = {}
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.steps = 0
        self.model_busy_s = 0.0
        self.kv_blocks: BlockStore | None = self.runner.kv_blocks
        self.connector = connector
        if connector is not None:
            connector.bind(self)

    # ----- requests -------------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    arrival_time: float | None = None) -> None:
        """Queue a request (its `params.n` choices); `ValueError` names what is wrong with it."""
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        ids = self.validate(prompt_ids, params)
        seqs = [Sequence(request_id, i, ids, params, arrival_time) for i in range(params.n)]
        for seq in seqs[1:]:
            seq.fork_parent = seqs[0]
        self.requests[request_id] = seqs
        for seq in seqs:
            self.scheduler.add(seq)
        self.prompt_tokens += len(ids)

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> list[int]:
        """Check a request against this engine (thread-safe: reads only fixed facts); returns the ids."""
        ids = check_prompt(prompt_ids, params, self.vocab_size, self.max_model_len)
        if params.kv_retention is not None and params.kv_retention not in self.config.kv.kv_retention:
            raise ValueError(f"unknown KV retention class {params.kv_retention!r}; "
                             f"known: {sorted(self.config.kv.kv_retention)}")
        return ids

    def abort_request(self, request_id: str) -> list[RequestOutput]:
        """End a request now, freeing its KV blocks; returns its final outputs (reason "abort")."""
        if self.connector is not None:
            self.connector.request_aborted(request_id)
        seqs = self.requests.pop(request_id, None)
        if seqs is None:
            return []
        outputs = []
        for seq in seqs:
            if not seq.is_finished:
                self.scheduler.finish(seq, "abort")
                outputs.append(self._output(seq, (), None, time.perf_counter()))
            self._first_token_time.pop(seq.seq_id, None)
        return outputs

    def num_waiting_requests(self) -> int:
        """Requests with a sequence in the waiting queue (not yet started, or preempted). Safe to call from
        another thread: it reads a snapshot of the queue."""
        return len({seq.request_id for seq in list(self.scheduler.waiting)})

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or bool(self._inflight)

    def has_request(self, request_id: str) -> bool:
        """Whether the request is still held (not finished, not aborted)."""
        return request_id in self.requests

    # ----- stepping -------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one step; returns the output deltas of the step that completed (if any)."""
        if self._executor is None:
            raise RuntimeError("the engine was shut down")
        outputs: list[RequestOutput] = []
        spec = self.speculator
        if spec is not None:
            may_draft = spec.may_draft(self.scheduler.running)
            if may_draft and self._inflight:  # a draft starts from its sequence's last token: learn it first
                outputs = self.drain()
            spec.draft(self.scheduler.running, may_draft)
        sched = self.scheduler.schedule()
        if not self.async_scheduling or (spec is not None and any(s.draft_ids for s in sched.scheduled)):
            outputs += self.drain()  # a verify step runs alone: the next step depends on what it accepts
            if sched:
                result = self._executor.submit(self._execute, self.runner.prepare(sched)).result()
                outputs += self._postprocess(sched, result)
            return outputs
        if sched:
            self._inflight.append((sched, self._executor.submit(self._execute, self.runner.prepare(sched))))
        if len(self._inflight) > 1 or (self._inflight and not sched):
            done, future = self._inflight.popleft()
            outputs += self._postprocess(done, future.result())
        return outputs

    def _execute(self, step: PreparedStep) -> StepResult:
        """One step on the model thread, then its observers; their time counts as the step's."""
        result = self.runner.execute(step)
        if self.step_observers:
            for observer in self.step_observers:
                observer.after_step(step, result)
            devices.synchronize(self.device)
            result.end_time = time.perf_counter()
        return result

    def _postprocess(self, sched: SchedulerOutput, result: StepResult) -> list[RequestOutput]:
        self.steps += 1
        self.model_busy_s += result.end_time - result.start_time
        now = time.perf_counter()
        outputs = []
        row = 0
        if self.kv_tiers is not None or self.swa_sessions is not None:  # before finishing frees them: blocks
            # this step completed go down (tiers), window state at grain boundaries is copied (session cache)
            for s in sched.scheduled:
                if s.seq.block_table:
                    self.block_manager.commit(s.seq)
                    self.block_manager.offload(s.seq, s.start + s.num_tokens)
        spec = self.speculator
        if spec is not None:  # a step of decoding sequences alone (verify or plain decode) is a cell of the cost
            decoding = all(s.sample and s.num_tokens == 1 + len(s.draft_ids) for s in sched.scheduled)
            spec.observe_step(len(sched.scheduled), sched.num_tokens, result.end_time - result.start_time,
                              verify=result.num_accepted is not None, decoding=decoding)
        for s in sched.scheduled:
            if not s.sample:
                continue
            seq = s.seq
            dead = bool(result.dead_end and result.dead_end[row])
            if result.emitted is not None:
                assert result.emitted_logprobs is not None and result.num_accepted is not None
                tokens, logprobs = result.emitted[row], result.emitted_logprobs[row]
                if s.draft_ids:  # before anything can finish it: the prefix cache must not see draft KV
                    spec.settle(seq, s.start, len(s.draft_ids), result.num_accepted[row])
            else:
                tokens, logprobs = ([] if dead else [result.token_ids[row]]), [result.logprobs[row]]
            terminated = result.terminated[row]
            row += 1
            seq.num_pending -= 1
            if seq.is_finished:
                continue  # ended (or aborted) while this step was in flight
            self._first_token_time.setdefault(seq.seq_id, now)
            p = seq.params
            new: list[int] = []
            reason = "dead_end" if dead else ("stop" if terminated else None)  # after the tokens, if they all go
            for token in tokens:  # a dead end emits nothing more: the constraint refused what came next
                if token in p.stop_token_ids or (token in self.eos_token_ids and not p.ignore_eos):
                    seq.stop_token_id = token
                    reason = "stop"
                    break
                seq.token_ids.append(token)
                seq.token_times.append(now)
                self.output_tokens += 1
                new.append(token)
                if len(seq.token_ids) - seq.num_prompt_tokens >= p.max_tokens or len(seq.token_ids) >= self.max_model_len:
                    reason = "stop" if terminated and len(new) == len(tokens) else "length"
                    break
            if reason is not None:
                self._finish(seq, reason)
            if new or reason is not None:
                lps = tuple(logprobs[: len(new)]) if p.logprobs is not None else None
                outputs.append(self._output(seq, tuple(new), lps, now))
        for s in sched.scheduled:
            if s.seq.block_table:
                self.block_manager.commit(s.seq)
        if spec is not None:
            spec.collect_verdicts()  # the drafts whose tokens this step emitted
        return outputs

    def _finish(self, seq: Sequence, reason: str) -> None:
        if self.connector is not None:  # before its blocks are freed: the connector may save them
            self.connector.request_finished(seq, reason)
        self.scheduler.finish(seq, reason)
        seqs = self.requests.get(seq.request_id)
        if seqs is not None and all(x.is_finished for x in seqs):
            del self.requests[seq.request_id]

    def resume(self, request_id: str, seqs: list[Sequence]) -> None:
        """Decode `seqs` (one request's choices) whose prompt KV a connector loaded: blocks held, prompt
        computed, first token appended."""
        now = time.perf_counter()
        for seq in seqs:
            seq.scheduled_time = now
            seq.status = SequenceStatus.RUNNING
            self.block_manager.commit(seq)
            self.scheduler.running.append(seq)
            self._first_token_time[seq.seq_id] = now
            self.output_tokens += 1
        if seqs:
            self.requests[request_id] = seqs

    def _output(self, seq: Sequence, new: tuple[int, ...], logprobs: Any, now: float) -> RequestOutput:
        first = self._first_token_time.get(seq.seq_id)
        if seq.is_finished:
            self._first_token_time.pop(seq.seq_id, None)
        return RequestOutput(
            request_id=seq.request_id, index=seq.index, new_token_ids=new, new_logprobs=logprobs,
            finished=seq.is_finished, finish_reason=seq.finish_reason, prompt_tokens=seq.num_prompt_tokens,
            cached_tokens=seq.num_cached_tokens,
            timing=RequestTiming(seq.arrival_time, first, (now,) if new else (), seq.scheduled_time),
            stop_token_id=seq.stop_token_id,
        )

    # ----- introspection --------------------------------------------------------------------------------
    def compute_path(self) -> str:
        """The config's path, and how many linears stayed dense where block weights were asked for."""
        return self.config.compute_path + census_note(self.model)

    def stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(
            running=len(self.scheduler.running), waiting=len(self.scheduler.waiting), kv_usage=bm.usage,
            num_kv_blocks=bm.num_blocks, prefix_cache_queries=bm.prefix_queries, prefix_cache_hits=bm.prefix_hits,
            prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, steps=self.steps,
            model_busy_s=self.model_busy_s,
            kv_tiers=None if self.kv_tiers is None else self.kv_tiers.snapshot(), restored_tokens=bm.restored_tokens,
            speculative=None if self.speculator is None else self.speculator.metrics.snapshot(),
            swa_sessions=None if self.swa_sessions is None else replace(self.swa_sessions.stats))

    def drain(self) -> list[RequestOutput]:
        """Wait for steps in flight and post-process them."""
        outputs: list[RequestOutput] = []
        while self._inflight:
            sched, future = self._inflight.popleft()
            outputs.extend(self._postprocess(sched, future.result()))
        return outputs

    def shutdown(self) -> None:
        for sched, future in list(self._inflight):
            del sched
            future.cancel()
        self._inflight.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self.kv_tiers is not None:  # writes what is queued for the directory tier, frees the segment
            self.kv_tiers.close()
            self.kv_tiers = None
            self.block_manager.tiers = None
