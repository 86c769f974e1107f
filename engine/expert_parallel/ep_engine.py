"""`LLM(model, expert_parallel_size=N)` on DeepSeek-V3 or DeepSeek-V4: N rank processes, each an `LLMEngine`
over the same checkpoint with its share of the routed experts (attention, routers and shared experts
replicated: data-parallel attention; a hash-routed V4 layer picks experts by token id on the token's rank).

The driver (this object, in the caller's process) owns no model. It hands each new request to the rank
with the fewest unfinished requests and steps all ranks in lockstep: every rank runs one engine step per
driver step, and a rank whose step runs no forward (no work, or nothing schedulable) still enters every
MoE layer's collectives with zero tokens. With `eplb_interval_steps`, the ranks record expert loads and
rebalance (EPLB) together after every that many steps. Workers run synchronous steps.

Processes are spawned, joined with a gloo (NCCL on GPUs) group, and ended by pid on `shutdown`.
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import fields
from typing import Any

import torch
import torch.multiprocessing as mp
from recipe.engine.config import EngineConfig
from recipe.engine.core import EngineCore, EngineStats
from recipe.engine.expert_parallel.process_group import end_processes, free_port, init_rank
from recipe.engine.outputs import RequestOutput
from recipe.engine.prompt_check import check_prompt
from recipe.engine.sampling_params import SamplingParams


def _first_ep_layer(model: Any) -> Any:
    from recipe.engine.expert_parallel.sharded_weights import moe_layers

    return next(m.expert_parallel for m in moe_layers(model).values())


def _portable(exc: BaseException) -> BaseException:
    """What the driver re-raises: bad-input errors as they are, anything else with the rank's traceback."""
    return exc if isinstance(exc, (ValueError, TypeError)) else RuntimeError(traceback.format_exc())


def _worker(rank: int, world: int, port: int, model_path: str, config: dict[str, Any], conn: Any) -> None:
    """One rank: load its shard, build its engine, then serve the driver's commands until "stop"."""
    try:
        torch.set_num_threads(config.get("num_threads") or 1)
        init_rank(rank, world, port)
        from recipe.engine.device import parse_dtype
        from recipe.engine.expert_parallel import metrics
        from recipe.engine.expert_parallel.ep_moe import enter_collectives_without_tokens
        from recipe.engine.expert_parallel.load_recorder import ExpertLoadRecorder
        from recipe.engine.expert_parallel.placement_apply import rebalance
        from recipe.engine.expert_parallel.sharded_weights import (
            CheckpointExperts,
            moe_layers,
            shard_for_rank,
        )
        from recipe.engine.llm_engine import LLMEngine
        from recipe.engine.models.registry import load_model
        from recipe.engine.models.safetensors_loader import SafetensorsCheckpoint

        cfg = EngineConfig.from_kwargs(model_path, **config)
        loaded = load_model(model_path, dtype=parse_dtype(cfg.checkpoint.dtype), device=cfg.checkpoint.device,
                            shard=shard_for_rank(rank, world))
        engine_config = {k: v for k, v in config.items() if k not in EP_FIELDS}
        engine = LLMEngine(loaded, **{**engine_config, "async_scheduling": False})
        model = engine.model
        if not moe_layers(model):
            raise ValueError("expert parallelism needs a mixture-of-experts checkpoint (DeepSeek-V3 or DeepSeek-V4); "
                             f"{model_path!r} has no routed experts")
        layer = _first_ep_layer(model)
        recorder = ExpertLoadRecorder(model) if cfg.parallel.eplb_interval_steps else None
        fetch = CheckpointExperts(SafetensorsCheckpoint(model_path))
        conn.send(("ready", engine.model_info, engine.max_model_len))
    except BaseException as exc:  # reported to the driver, which raises it
        conn.send(("error", _portable(exc)))
        return
    steps = 0
    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "stop":
                break
            if cmd == "add":
                engine.add_request(*arg)
                reply: Any = None
            elif cmd == "abort":
                reply = engine.abort_request(arg)
            elif cmd == "step":
                before = layer.calls
                with torch.inference_mode():
                    out = engine.step() if engine.has_unfinished_requests() else []
                    if layer.calls == before:  # no forward ran here: still meet the others in every layer
                        enter_collectives_without_tokens(model)
                steps += 1
                if recorder is not None and steps % cfg.parallel.eplb_interval_steps == 0:  # type: ignore[operator]
                    with torch.inference_mode():
                        rebalance(model, recorder, rank, world, cfg.parallel.eplb_redundant_experts, fetch)
                reply = (out, set(engine.requests), engine.num_waiting_requests())
            elif cmd == "stats":
                reply = engine.stats()
            elif cmd == "metrics":
                reply = metrics.collect(model, reset=bool(arg))
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send(("ok", reply))
        except BaseException as exc:  # the driver re-raises it; collectives may be out of step after this
            conn.send(("error", _portable(exc)))
    engine.shutdown()
    import torch.distributed as dist

    dist.destroy_process_group()


EP_FIELDS = ("expert_parallel_size",)


class ExpertParallelEngine:
    """An `EngineCore` (engine/core.py) served by `expert_parallel_size` rank processes, each an `LLMEngine`.
    The driver knows which rank holds each request; a rank reports after every step which it still holds."""

    def __init__(self, model: Any, **config: Any) -> None:
        if not isinstance(model, str):
            raise ValueError("expert parallelism loads the checkpoint in every rank: pass a checkpoint path")
        self.config = EngineConfig.from_kwargs(model, **config)
        world = self.config.parallel.expert_parallel_size
        ctx = mp.get_context("spawn")
        port = free_port()
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        self._owner: dict[str, int] = {}
        self._unfinished = [False] * world
        self._waiting = [0] * world
        plain = {k: v for k, v in self.config.flat().items() if k in config}
        try:
            for r in range(world):
                mine, theirs = ctx.Pipe()
                p = ctx.Process(target=_worker, args=(r, world, port, model, plain, theirs), daemon=True)
                p.start()
                self._conns.append(mine)
                self._procs.append(p)
            replies = [self._recv(c, timeout_s=600) for c in self._conns]
        except BaseException:
            end_processes(self._procs)
            raise
        self.model_info: Any = replies[0][0]
        self.max_model_len: int = replies[0][1]
        self.vocab_size = int(self.model_info.vocab_size)

    # ----- plumbing -----
    def _recv(self, conn: Any, timeout_s: float | None = None) -> Any:
        if timeout_s is not None and not conn.poll(timeout_s):
            raise RuntimeError("an expert-parallel rank did not answer")
        kind, *rest = conn.recv()
        if kind == "error":
            err = rest[0]
            raise err if isinstance(err, BaseException) else RuntimeError(f"expert-parallel rank failed:\n{err}")
        return rest[0] if kind == "ok" else tuple(rest)

    def _call(self, rank: int, cmd: str, arg: Any = None) -> Any:
        self._conns[rank].send((cmd, arg))
        return self._recv(self._conns[rank])

    def _all(self, cmd: str, arg: Any = None) -> list[Any]:
        for c in self._conns:
            c.send((cmd, arg))
        return [self._recv(c) for c in self._conns]

    # ----- the EngineCore calls -----
    def validate(self, prompt_ids: list[int], params: SamplingParams) -> list[int]:
        ids = check_prompt(prompt_ids, params, self.vocab_size, self.max_model_len)
        return ids

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
                    arrival_time: float | None = None) -> None:
        if request_id in self._owner:
            raise ValueError(f"request id {request_id!r} is already in use")
        load = [sum(o == r for o in self._owner.values()) for r in range(len(self._conns))]
        rank = min(range(len(load)), key=lambda r: (load[r], r))
        self._call(rank, "add", (request_id, prompt_ids, params, arrival_time))
        self._owner[request_id] = rank
        self._unfinished[rank] = True
        self._waiting[rank] += 1  # until the rank's next step reports its queue

    def abort_request(self, request_id: str) -> list[RequestOutput]:
        rank = self._owner.pop(request_id, None)
        return [] if rank is None else list(self._call(rank, "abort", request_id))

    def step(self) -> list[RequestOutput]:
        """One lockstep step of every rank; the output deltas of all of them."""
        outputs: list[RequestOutput] = []
        for r, (out, live, waiting) in enumerate(self._all("step")):
            outputs.extend(out)
            self._unfinished[r], self._waiting[r] = bool(live), waiting
            for rid in [rid for rid, owner in self._owner.items() if owner == r and rid not in live]:
                del self._owner[rid]
        return outputs

    def has_unfinished_requests(self) -> bool:
        return any(self._unfinished)

    def has_request(self, request_id: str) -> bool:
        return request_id in self._owner

    def num_waiting_requests(self) -> int:
        return sum(self._waiting)

    def drain(self) -> list[RequestOutput]:
        return []  # workers step synchronously: nothing is ever in flight between driver steps

    def compute_path(self) -> str:
        """The config's path (each rank's model lives in its own process, so no linear census here)."""
        return self.config.compute_path

    def stats(self) -> EngineStats:
        """The ranks' stats summed; KV usage their mean; steps and model time the slowest rank's (the ranks
        step together)."""
        per = self._all("stats")
        total = {f.name: sum(getattr(s, f.name) for s in per) for f in fields(EngineStats)
                 if isinstance(getattr(per[0], f.name), (int, float))}
        total["kv_usage"] = sum(s.kv_usage for s in per) / len(per)
        total["steps"] = max(s.steps for s in per)
        total["model_busy_s"] = max(s.model_busy_s for s in per)
        total["kv_tiers"] = None
        return EngineStats(**total)

    def expert_parallel_metrics(self, reset: bool = False) -> Any:
        """`metrics.EPMetrics` gathered over the ranks (rows per rank, imbalance, all-to-all time, replicas)."""
        return self._all("metrics", reset)[0]

    def shutdown(self) -> None:
        for c in self._conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                c.send(("stop", None))
        for p in self._procs:
            p.join(timeout=30)
        end_processes(self._procs)
        self._procs, self._conns = [], []


def create_engine(model: Any, **config: Any) -> EngineCore:
    """An `LLMEngine`, or an `ExpertParallelEngine` when `expert_parallel_size` > 1."""
    from recipe.engine.llm_engine import LLMEngine

    if int(config.get("expert_parallel_size", 1) or 1) > 1:
        return ExpertParallelEngine(model, **config)
    return LLMEngine(model, **config)
