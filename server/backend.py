"""What the server needs from a token generator, and the instant echo backend used to measure the server.

The server talks only to `Backend`: the embedded engine is adapted to it in `engine_backend.py`; `EchoBackend`
answers instantly without a model, so that a benchmark can measure what the HTTP layer itself costs per token.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from recipe.tokenizer import Tokenizer, load_deepseek_v4_tokenizer

ChatFormat = Literal["chatml", "deepseek_v4", "deepseek_v41", "deepseek_r1"]
# "dead_end": the output constraint allowed no token (or refused the sampled one) before it could end.
FinishReason = Literal["stop", "length", "content_filter", "abort", "dead_end"]


class BackendQueueFull(Exception):
    """The backend cannot take another request now; the client should retry later."""


class BackendRejected(Exception):
    """The backend refused the request as given (its message is safe to show the client)."""


class BackendUnavailable(Exception):
    """The backend cannot generate at all any more (its engine failed or stopped); retrying will not help
    until the server is restarted. The message is safe to show the client."""


@dataclass(frozen=True)
class ModelCard:
    """The served model as the server sees it: names, prompt format, limits and tokenizer."""

    name: str
    architecture: str
    context_length: int
    chat_format: ChatFormat
    eos_token_ids: tuple[int, ...]
    tokenizer: Tokenizer
    created: int = 0


@dataclass(frozen=True)
class GenerationParams:
    """Sampling for one request; mirrors `recipe.engine.SamplingParams` without importing torch."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    logprobs: int | None = None
    n: int = 1
    stop_token_ids: tuple[int, ...] = ()
    constraint: Any = None
    kv_retention: str | None = None  # retention class of the request's stored KV (None: the engine's default)
    session_key: str | None = None  # the conversation the request continues (prompt_cache_key)


@dataclass(frozen=True)
class TokenLogprobs:
    """Log-probability of one chosen token and its top alternatives `(token_id, logprob)`."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class GenerationDelta:
    """New tokens of one sequence (`index` < n) since the previous delta; `finished` on the last one."""

    index: int
    token_ids: tuple[int, ...]
    prompt_tokens: int
    cached_tokens: int = 0
    logprobs: tuple[TokenLogprobs, ...] | None = None
    finished: bool = False
    finish_reason: FinishReason | None = None
    queue_time_s: float | None = None


@dataclass(frozen=True)
class BackendStats:
    """Live load figures read by `/metrics` at scrape time; counters are cumulative."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    kv_blocks_used: int = 0  # KV blocks held by live sequences (0 once idle: more is a leak)
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    restored_tokens: int = 0  # of the hits, prompt tokens restored from the lower KV tiers
    kv_tiers: Any = None  # the engine's kv_tiers.TierSnapshot when its lower KV tiers are on
    swa_sessions: Any = None  # the engine's session_cache.SessionStats when its V4 session cache is on
    speculative: Any = None  # the engine's speculative.SpecMetrics when speculative decoding is on


class Backend(Protocol):
    model: ModelCard

    def generate(
        self, request_id: str, prompt_ids: Sequence[int], params: GenerationParams
    ) -> AsyncIterator[GenerationDelta]: ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> BackendStats: ...

    def failure(self) -> str | None:
        """None while the backend can serve; otherwise a short reason, safe to show (for `/health`)."""
        ...

    async def shutdown(self) -> None: ...


@dataclass
class EchoBackend:
    """Answers instantly, `chunk` ids per delta. No model, no sampling, no constraint.

    `mode` "repeat": each sequence repeats the prompt's plain (non-special) tokens until `max_tokens` ids
    have been produced (finish "length"), for load tests. "reply" (what `recipe serve --backend echo`
    runs): the last user turn's plain tokens once, after closing an opened thinking block, then the end of
    sequence (finish "stop"), as a model's short answer; "length" only when `max_tokens` comes first.

    Serves the DeepSeek V4 prompt format by default so the whole request path (conversion, rendering,
    encoding, stream processing, SSE) runs exactly as with a real model.
    """

    model: ModelCard = field(default_factory=lambda: echo_model_card())
    chunk: int = 1
    token_delay_s: float = 0.0
    mode: str = "repeat"
    _running: set[str] = field(default_factory=set)
    _aborted: set[str] = field(default_factory=set)
    _served: int = 0

    async def generate(
        self, request_id: str, prompt_ids: Sequence[int], params: GenerationParams
    ) -> AsyncIterator[GenerationDelta]:
        special = self.model.tokenizer.special_ids
        if self.mode == "reply":
            source = self._reply(prompt_ids)
            limit = min(params.max_tokens, len(source))
            ended: FinishReason = "stop" if limit == len(source) else "length"  # the reply's last id is the EOS
        else:
            source = [t for t in prompt_ids if t not in special] or [0]
            limit, ended = params.max_tokens, "length"
        self._running.add(request_id)
        self._served += 1
        try:
            done = [0] * params.n
            while min(done) < limit:
                for index in range(params.n):
                    if request_id in self._aborted:
                        return
                    if done[index] >= limit:
                        continue
                    take = min(self.chunk, limit - done[index])
                    ids = tuple(source[(done[index] + k) % len(source)] for k in range(take))
                    done[index] += take
                    last = done[index] >= limit
                    lps = None
                    if params.logprobs is not None:
                        lps = tuple(
                            TokenLogprobs(0.0, tuple((t, 0.0) for t in (i,) * params.logprobs)) for i in ids
                        )
                    yield GenerationDelta(
                        index=index,
                        token_ids=ids,
                        prompt_tokens=len(prompt_ids),
                        logprobs=lps,
                        finished=last,
                        finish_reason=None if not last else ended,
                        queue_time_s=0.0,
                    )
                # Yield to the event loop between steps like a real engine does between decode steps.
                await asyncio.sleep(self.token_delay_s)
        finally:
            self._running.discard(request_id)
            self._aborted.discard(request_id)

    def _reply(self, prompt_ids: Sequence[int]) -> list[int]:
        """The "reply" answer: `</think>` if the prompt opened thinking, then the last user turn's text as the
        model would write it (a markup spelling in it, such as a DSML tool call, as its special token: so a
        client's tool loop can be driven by what its user types), then the end of sequence."""
        tok = self.model.tokenizer
        added, special = tok.added_ids, tok.special_ids
        user, think, think_end = (added.get(s) for s in ("<｜User｜>", "<think>", "</think>"))
        ids = list(prompt_ids)
        start = max((i for i, t in enumerate(ids) if t == user), default=-1) + 1
        turn = [t for t in ids[start:] if t not in special] or [t for t in ids if t not in special][-16:] or [0]
        opened = [think_end] if ids and think is not None and ids[-1] == think and think_end is not None else []
        markup = _markup_pattern(tuple(added))
        spoken = [] if markup is None else [
            i for part in markup.split(tok.decode(turn)) if part
            for i in ([added[part]] if part in added else tok.encode_plain(part))]
        return opened + (spoken or turn) + list(self.model.eos_token_ids[:1])

    async def abort(self, request_id: str) -> None:
        if request_id in self._running:
            self._aborted.add(request_id)

    def stats(self) -> BackendStats:
        return BackendStats(running=len(self._running))

    def failure(self) -> str | None:
        return None

    async def shutdown(self) -> None:
        for rid in list(self._running):
            await self.abort(rid)


@functools.lru_cache(maxsize=4)
def _markup_pattern(spellings: tuple[str, ...]) -> re.Pattern[str] | None:
    """Splits text around the tokenizer's markup spellings (`｜DSML｜`, `</think>`), keeping them."""
    marks = sorted((s for s in spellings if s in ("｜DSML｜", "</think>", "<think>")), key=len, reverse=True)
    return re.compile("(" + "|".join(map(re.escape, marks)) + ")") if marks else None


def echo_model_card(name: str = "echo", context_length: int = 131072) -> ModelCard:
    """The echo backend's model: the DeepSeek V4 tokenizer and prompt format, no weights."""
    tok = load_deepseek_v4_tokenizer()
    eos = tok.added_ids.get("<｜end▁of▁sentence｜>")
    return ModelCard(
        name=name,
        architecture="echo",
        context_length=context_length,
        chat_format="deepseek_v4",
        eos_token_ids=(eos,) if eos is not None else (),
        tokenizer=tok,
    )
