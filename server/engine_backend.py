"""The embedded engine (`recipe.engine.AsyncLLM`) behind the server's `Backend` face."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from recipe.server.backend import (
    BackendQueueFull,
    BackendRejected,
    BackendStats,
    BackendUnavailable,
    GenerationDelta,
    GenerationParams,
    ModelCard,
    TokenLogprobs,
)

from recipe.tokenizer import Tokenizer


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


ENGINE_DOWN = "The model engine is not running (it failed or was stopped); see the server log."


def model_card(engine: Any, name: str | None = None) -> ModelCard:
    """The served model as described by `engine.model_info`; its context length is the engine's own limit
    (`max_model_len`: the configured limit, or what the KV pool holds), not the checkpoint's."""
    info = engine.model_info
    tok = _get(info, "tokenizer")
    if not isinstance(tok, Tokenizer):
        tok = Tokenizer(_get(info, "tokenizer_json"), name=str(_get(info, "name", default="")))
    fmt = str(_get(info, "chat_format", default="chatml"))
    return ModelCard(
        name=name or str(_get(info, "name", default="model")),
        architecture=str(_get(info, "architecture", default="")),
        context_length=int(_get(engine, "max_model_len", default=None) or _get(info, "context_length", "max_model_len")),
        chat_format=fmt,  # type: ignore[arg-type]
        eos_token_ids=tuple(int(i) for i in _get(info, "eos_token_ids", "eos_ids", default=())),
        tokenizer=tok,
    )


def _logprobs(lp: Any) -> TokenLogprobs:
    """The engine's `(logprob, [(id, logprob), ...])` (or None for a token without them)."""
    if lp is None:
        return TokenLogprobs(0.0)
    chosen, top = lp
    return TokenLogprobs(float(chosen), tuple((int(t), float(v)) for t, v in top))


class EngineBackend:
    """Adapts `AsyncLLM`: `GenerationParams` → `SamplingParams`, `RequestOutput` → `GenerationDelta`."""

    def __init__(self, engine: Any, name: str | None = None) -> None:
        from recipe import engine as engine_pkg

        self.engine = engine
        self._sampling_params = engine_pkg.SamplingParams
        self._queue_full: type[BaseException] = getattr(engine_pkg, "QueueFullError", BackendQueueFull)
        self._engine_dead: type[BaseException] = getattr(engine_pkg, "EngineDeadError", BackendUnavailable)
        self.model = model_card(engine, name)

    def sampling_params(self, p: GenerationParams) -> Any:
        return self._sampling_params(
            temperature=p.temperature, top_p=p.top_p, top_k=p.top_k, min_p=p.min_p,
            presence_penalty=p.presence_penalty, frequency_penalty=p.frequency_penalty,
            repetition_penalty=p.repetition_penalty, ignore_eos=p.ignore_eos,
            max_tokens=p.max_tokens, stop_token_ids=tuple(p.stop_token_ids), seed=p.seed,
            logprobs=p.logprobs, n=p.n, constraint=p.constraint, kv_retention=p.kv_retention,
            session_key=p.session_key,
        )

    async def generate(
        self, request_id: str, prompt_ids: Sequence[int], params: GenerationParams
    ) -> AsyncIterator[GenerationDelta]:
        try:
            async for out in self.engine.generate(request_id, list(prompt_ids), self.sampling_params(params)):
                lps = out.new_logprobs
                timing = getattr(out, "timing", None)
                scheduled = getattr(timing, "scheduled_time", None)
                yield GenerationDelta(
                    index=int(getattr(out, "index", 0) or 0),
                    token_ids=tuple(out.new_token_ids),
                    prompt_tokens=int(out.prompt_tokens),
                    cached_tokens=int(getattr(out, "cached_tokens", 0) or 0),
                    logprobs=None if lps is None else tuple(_logprobs(lp) for lp in lps),
                    finished=bool(out.finished),
                    finish_reason=out.finish_reason,
                    queue_time_s=None if scheduled is None else scheduled - getattr(timing, "arrival_time", scheduled),
                )
        except self._queue_full as exc:
            raise BackendQueueFull(str(exc)) from None
        except self._engine_dead:
            raise BackendUnavailable(ENGINE_DOWN) from None
        except ValueError as exc:  # the engine validates before it queues: a bad request, not a failure
            raise BackendRejected(str(exc)) from None

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    def stats(self) -> BackendStats:
        s = self.engine.stats()
        return BackendStats(
            running=int(_get(s, "running", "num_running", default=0)),
            waiting=int(_get(s, "waiting", "num_waiting", default=0)),
            kv_usage=float(_get(s, "kv_usage", "kv_cache_usage", default=0.0)),
            kv_blocks_used=round(float(_get(s, "kv_usage", "kv_cache_usage", default=0.0))
                                 * int(_get(s, "num_kv_blocks", default=0))),
            prefix_cache_queries=int(_get(s, "prefix_cache_queries", default=0)),
            prefix_cache_hits=int(_get(s, "prefix_cache_hits", default=0)),
            restored_tokens=int(_get(s, "restored_tokens", default=0)),
            kv_tiers=getattr(s, "kv_tiers", None),
            swa_sessions=getattr(s, "swa_sessions", None),
            speculative=getattr(s, "speculative", None),
        )

    def failure(self) -> str | None:
        if getattr(self.engine, "is_running", True):
            return None
        return "engine failed" if getattr(self.engine, "error", None) is not None else "engine stopped"

    async def shutdown(self) -> None:
        result = self.engine.shutdown()
        if hasattr(result, "__await__"):
            await result
