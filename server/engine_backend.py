"""An engine client (`recipe.engine.core.EngineClient`: the embedded `AsyncLLM`, or the disaggregation router)
behind the server's `Backend` face. Only the protocol is read, so any client serves alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from recipe.server.backend import (
    BackendQueueFull,
    BackendRejected,
    BackendStats,
    BackendUnavailable,
    FinishReason,
    GenerationDelta,
    GenerationParams,
    ModelCard,
    TokenLogprobs,
)

from recipe.tokenizer import Tokenizer

if TYPE_CHECKING:  # the protocol's module needs no torch, but the engine package it lives in does
    from recipe.engine.core import EngineClient


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


ENGINE_DOWN = "The model engine is not running (it failed or was stopped); see the server log."


def model_card(engine: EngineClient, name: str | None = None) -> ModelCard:
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
        context_length=int(engine.max_model_len),
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
    """Adapts an `EngineClient`: `GenerationParams` → `SamplingParams`, `RequestOutput` → `GenerationDelta`."""

    def __init__(self, engine: EngineClient, name: str | None = None) -> None:
        from recipe.engine import EngineDeadError, QueueFullError, SamplingParams

        self.engine = engine
        self._sampling_params = SamplingParams
        self._queue_full = QueueFullError
        self._engine_dead = EngineDeadError
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
                yield GenerationDelta(
                    index=out.index,
                    token_ids=tuple(out.new_token_ids),
                    prompt_tokens=out.prompt_tokens,
                    cached_tokens=out.cached_tokens,
                    logprobs=None if lps is None else tuple(_logprobs(lp) for lp in lps),
                    finished=out.finished,
                    finish_reason=cast("FinishReason | None", out.finish_reason),  # the engine's reasons are the API's
                    queue_time_s=out.timing.queue_time,
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
            running=s.running, waiting=s.waiting, kv_usage=s.kv_usage,
            kv_blocks_used=round(s.kv_usage * s.num_kv_blocks),
            prefix_cache_queries=s.prefix_cache_queries, prefix_cache_hits=s.prefix_cache_hits,
            restored_tokens=s.restored_tokens, kv_tiers=s.kv_tiers, swa_sessions=s.swa_sessions,
            speculative=s.speculative,
        )

    def failure(self) -> str | None:
        return self.engine.health_problem()

    async def shutdown(self) -> None:
        await self.engine.shutdown()
