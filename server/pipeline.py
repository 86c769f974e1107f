"""One generation request end to end: body → conversion → prompt ids → backend → protocol events.

`Pipeline.prepare` does everything that can fail with a 4xx before any byte is sent (conversion,
rendering, encoding, the context check, compiling the output constraint). `Pipeline.run` drives the
backend and feeds one stream processor per choice, yielding the protocol events as they form; leaving the
iterator early (client gone, timeout, error) aborts the backend request so its KV is freed at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import orjson
from recipe.server.backend import (
    Backend,
    BackendQueueFull,
    BackendRejected,
    BackendUnavailable,
    GenerationDelta,
    GenerationParams,
)
from recipe.server.constraint_memo import ConstraintMemo
from recipe.server.errors import Api, ApiError
from recipe.server.limits import Admission, queue_full
from recipe.server.metrics import RequestTimer, ServerMetrics
from recipe.server.protocol_parts import ProtocolParts
from recipe.server.sampling_extras import SamplingExtras

log = logging.getLogger("recipe.server")

_ID_PREFIX: dict[str, str] = {"chat": "chatcmpl-", "messages": "msg_", "responses": "resp_"}

DEAD_END_MESSAGE = ("The output format could not be completed: the constraint allowed no further token, "
                    "so generation stopped before the output was valid.")


def closed_tool_arguments(tools_json: str) -> str:
    """A tool-call constraint's tool list with each function's argument objects closed
    (`recipe.constraints.closed_objects`): a forced call can then always end, as every output stays valid."""
    from recipe.constraints.closed_objects import close_objects

    tools = orjson.loads(tools_json)
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("parameters"), dict):
            fn["parameters"] = close_objects(fn["parameters"])
    return orjson.dumps(tools).decode()


class GenerationTimeout(Exception):
    """The request ran past the server's per-request timeout."""


def new_response_id(api: Api) -> str:
    return _ID_PREFIX[api] + uuid.uuid4().hex


@dataclass
class Generation:
    """A prepared request: what to generate and the processors (one per choice) that turn it into events."""

    api: Api
    request: Any  # recipe.conversation.ConversationRequest
    prompt_ids: list[int]
    params: GenerationParams
    response_id: str
    engine_request_id: str
    processors: list[Any]
    finish_reasons: list[str | None] = field(default_factory=list)
    admission: Admission | None = None
    # Fields the server sets on every Responses response object (store, previous_response_id).
    response_fields: dict[str, Any] = field(default_factory=dict)

    def release(self) -> None:
        """Give back the admission slot taken in `prepare`; safe to call more than once."""
        if self.admission is not None:
            self.admission.leave()
            self.admission = None

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)


class Pipeline:
    """Wires the protocol parts to a backend for one served model."""

    def __init__(
        self,
        parts: ProtocolParts,
        backend: Backend,
        metrics: ServerMetrics,
        admission: Admission,
        *,
        served_names: tuple[str, ...],
        request_timeout_s: float,
        retry_after_s: int = 1,
        offload_bytes: int = 64 * 1024,
        compile_timeout_s: float = 10.0,
        constraint_memo_bytes: int = 64 * 1024 * 1024,
        strict_reference: bool = False,
        default_thinking_mode: bool | None = None,
        max_output_tokens: int | None = None,
        close_tool_objects: bool = True,
        close_within_limit: bool = True,
    ) -> None:
        self.parts = parts
        self.backend = backend
        self.metrics = metrics
        self.admission = admission
        self.served_names = served_names
        self.request_timeout_s = request_timeout_s
        self.retry_after_s = retry_after_s
        self.constraint_memo = ConstraintMemo(constraint_memo_bytes)
        self.offload_bytes = offload_bytes
        self.compile_timeout_s = compile_timeout_s
        self.strict_reference = strict_reference
        self.close_tool_objects = close_tool_objects
        self.close_within_limit = close_within_limit
        self.default_thinking_mode = default_thinking_mode
        self.max_output_tokens = max_output_tokens
        card = backend.model
        digest = hashlib.sha256(f"{card.name}|{card.architecture}|{card.chat_format}".encode()).hexdigest()
        self.fingerprint = f"fp_{digest[:10]}"  # Chat `system_fingerprint`: which model setup answered
        self.options = self._conversion_options() if not parts.missing.get("codec") else None

    # -- preparation -------------------------------------------------------------------------------------

    def _conversion_options(self) -> Any:
        codec = self.parts.codec
        conv = self.parts.modules.get("codec")
        assert conv is not None
        from recipe.conversation import ModelVersion

        card = self.backend.model
        version = ModelVersion.V4 if card.chat_format == "deepseek_v4" else ModelVersion.V41
        names = {name: version for name in self.served_names}
        kwargs: dict[str, Any] = {"model_versions_by_name": names, "strict_reference": self.strict_reference}
        if self.default_thinking_mode is not None:
            kwargs["default_thinking_mode"] = self.default_thinking_mode
        elif card.chat_format == "chatml":
            kwargs["default_thinking_mode"] = False  # the demo model has no reasoning markup
        return codec.ConversionOptions(**kwargs)

    async def aconvert(self, api: Api, body: bytes | dict[str, Any], size: int) -> Any:
        """`convert`, off the event loop for bodies of `offload_bytes` or more (other streams keep flowing)."""
        if size >= self.offload_bytes:
            return await asyncio.to_thread(self.convert, api, body)
        return self.convert(api, body)

    def convert(self, api: Api, body: bytes | dict[str, Any]) -> Any:
        self.parts.require("codec", "errors")
        try:
            return self.parts.codec.convert(api, body, self.options)
        except self.parts.errors.RequestError as exc:
            raise ApiError(exc.status, exc.message, body=exc.body(api)) from None

    def render(self, request: Any) -> Any:
        """The served model's prompt (`RenderedPrompt`) for a converted request."""
        fmt = self.backend.model.chat_format
        self.parts.require(fmt)
        try:
            return getattr(self.parts, fmt).render(request.conversation)
        except ValueError as exc:  # what the prompt format cannot express (DeepSeek-R1: tools, tool turns)
            raise ApiError(400, str(exc), param="tools" if request.conversation.tools else "messages") from None

    def encode(self, request: Any, rendered: Any = None) -> list[int]:
        """Prompt token ids of a converted request, rendered by the served model's codec."""
        self.parts.require("encoding")
        rendered = rendered if rendered is not None else self.render(request)
        try:
            return list(self.parts.encoding.encode_rendered(rendered, self.backend.model.tokenizer))
        except Exception as exc:  # a special token the tokenizer lacks, or an image it cannot take
            if type(exc).__name__ == "MissingSpecialTokenError":
                raise ApiError(400, str(exc)) from None
            raise

    def _parse_from_output_start(self, request: Any, rendered: Any) -> Any:
        """A required tool call starts inside the tool-call block only if the prompt opened it. The ChatML
        prompt does not (the constrained output itself begins with `<tool_call>`), so parsing then starts
        at the top of the output. Likewise reasoning: a DeepSeek-R1 prompt that closed it (a JSON or regex
        answer) is answered without reasoning."""
        po = request.parsing_options
        stage = po.thinking_initial_stage
        if (self.backend.model.chat_format == "deepseek_r1" and stage is not None and stage.starts_in_reasoning()
                and rendered.prompt.endswith(self.parts.deepseek_r1.ANSWER_PROMPT)):
            return dataclasses.replace(request, parsing_options=dataclasses.replace(po, thinking_initial_stage=None))
        if (self.backend.model.chat_format == "chatml" and po.starts_in_tool_calls
                and not rendered.prompt.rstrip().endswith("<tool_call>")):
            return dataclasses.replace(request, parsing_options=dataclasses.replace(po, starts_in_tool_calls=False))
        return request

    async def compile_constraint(self, request: Any, single_tool_call: bool = False) -> Any:
        oc = request.inference_options.output_constraint
        if oc is None:
            return None
        self.parts.require("constraints")
        conv = request.conversation
        if oc.kind == "json" and oc.schema and conv.response_format == "json_schema" and conv.response_schema:
            # Conversion hands over the reference's normalised schema, which drops keywords such as
            # maxLength under `strict`; the mask enforces the schema the client actually sent.
            try:
                schema_text = orjson.dumps(conv.response_schema).decode()
            except (TypeError, orjson.JSONEncodeError):  # nested deeper than a JSON encoder goes (255)
                raise ApiError(400, "Cannot enforce the requested output format: the schema is nested too deeply.",
                               param="response_format") from None
            oc = dataclasses.replace(oc, schema=schema_text)
        if oc.kind in ("tool_call", "tool_call_required") and self.close_tool_objects:
            oc = dataclasses.replace(oc, schema=closed_tool_arguments(oc.schema))
        constraints = self.parts.constraints
        fmt = self.backend.model.chat_format
        tool_format = {"chatml": "chatml", "deepseek_v4": "dsml_v4", "deepseek_v41": "dsml_v41",
                       "deepseek_r1": None}[fmt]  # R1 has no tool-call format: tools are refused at rendering
        thinking = fmt != "chatml" and request.parsing_options.thinking_initial_stage is not None
        single = single_tool_call and oc.kind in ("tool_call", "tool_call_required")
        key = (oc, thinking, single)
        cached = self.constraint_memo.get(key)
        if cached is not None:
            return cached
        try:
            compiled = await asyncio.to_thread(  # the memo is the only cache: the compiler's own is bypassed
                constraints.from_output_constraint, oc, self.backend.model.tokenizer,
                tool_format=tool_format, thinking=thinking, single_tool_call=single,
                timeout_s=self.compile_timeout_s, cache=None,
            )
            if self.close_within_limit:  # the start state's closing search, once, off the engine's step thread
                await asyncio.to_thread(compiled.start_closing_length)
        except constraints.ConstraintError as exc:
            raise ApiError(400, f"Cannot enforce the requested output format: {exc}") from None
        self.constraint_memo.put(key, compiled, len(oc.schema))
        return compiled

    def resolve_max_tokens(self, request: Any, prompt_tokens: int) -> int:
        """The codec's limit for the prompt, lowered to the server's `max_output_tokens`."""
        try:
            limit = int(self.parts.codec.resolve_max_tokens(request, prompt_tokens, self.backend.model.context_length,
                                                            clamp_to_context=not self.strict_reference))
        except self.parts.errors.RequestError as exc:
            raise ApiError(exc.status, exc.message, code="context_length_exceeded") from None
        return limit if self.max_output_tokens is None else min(limit, self.max_output_tokens)

    async def prepare(
        self, api: Api, request: Any, *, echo: dict[str, Any] | None = None,
        response_fields: dict[str, Any] | None = None, size_hint: int = 0, single_tool_call: bool = False,
        extras: SamplingExtras | None = None,
        kv_retention: str | None = None,
        session_key: str | None = None,
    ) -> Generation:
        """Everything before generation; `size_hint` (the body's size) moves rendering and encoding of
        large requests to a worker thread so they do not stall the event loop. `single_tool_call`: the
        tool-call constraint allows one call at most (see `recipe.server.tool_policy`). `extras`: vLLM's extra
        sampling fields the body set (see `recipe.server.sampling_extras`)."""
        self.parts.require("stream", "updates")

        def render_encode() -> tuple[Any, list[int]]:
            rendered = self.render(request)
            return rendered, self.encode(request, rendered)

        if size_hint >= self.offload_bytes:
            rendered, prompt_ids = await asyncio.to_thread(render_encode)
        else:
            rendered, prompt_ids = render_encode()
        request = self._parse_from_output_start(request, rendered)
        max_tokens = self.resolve_max_tokens(request, len(prompt_ids))
        constraint = await self.compile_constraint(request, single_tool_call)
        if constraint is not None and self.close_within_limit:
            constraint = constraint.within_budget(max_tokens)  # ends complete instead of cut (constraints.closing)
        io = request.inference_options
        n = int(getattr(io, "n", 1) or 1)
        extras = extras or SamplingExtras()
        top_k = extras.top_k if extras.top_k is not None else getattr(io, "top_k", None)
        params = GenerationParams(
            max_tokens=max_tokens,
            temperature=1.0 if io.temperature is None else float(io.temperature),
            top_p=1.0 if io.top_p is None else float(io.top_p),
            top_k=-1 if not top_k else int(top_k),
            min_p=0.0 if extras.min_p is None else extras.min_p,
            repetition_penalty=1.0 if extras.repetition_penalty is None else extras.repetition_penalty,
            ignore_eos=extras.ignore_eos,
            presence_penalty=float(getattr(io, "presence_penalty", None) or 0.0),
            frequency_penalty=float(getattr(io, "frequency_penalty", None) or 0.0),
            seed=io.seed,
            logprobs=(int(io.top_logprobs or 0) if io.logprobs else None),
            n=n,
            # ignore_eos (vLLM's meaning): the end-of-sequence ids do not stop the output either.
            stop_token_ids=() if extras.ignore_eos else self.backend.model.eos_token_ids,
            constraint=constraint,
            kv_retention=kv_retention,
            session_key=session_key,
        )
        response_id = new_response_id(api)
        created = int(time.time())
        card = self.backend.model
        extra: dict[str, Any] = {"echo": echo} if api == "responses" and echo is not None else {}
        processors = [
            self.parts.stream.StreamProcessor(
                api,
                request,
                response_id=response_id,
                model=request.model or card.name,
                tokenizer=card.tokenizer,
                output_format=card.chat_format,
                created=created,
                choice_index=i,
                emit_done=n == 1,  # n > 1: one [DONE] after every choice (delivery adds it)
                **extra,
            )
            for i in range(n)
        ]
        self.admission.enter()  # 429 when full; released when the run ends or the response closes
        return Generation(
            api, request, prompt_ids, params, response_id, response_id, processors, [None] * n, self.admission,
            dict(response_fields or {}),
        )

    # -- running -----------------------------------------------------------------------------------------

    async def run(self, gen: Generation) -> AsyncGenerator[list[tuple[int, Any]], None]:
        """Yields lists of `(choice_index, event)`; ends when every choice has finished."""
        updates = self.parts.updates
        n = len(gen.processors)
        readied = [False] * n
        done = [False] * n  # the processor has its final events
        engine_done = [False] * n  # the backend sent the sequence's last delta
        eos = frozenset() if gen.params.ignore_eos else frozenset(self.backend.model.eos_token_ids)
        timer = RequestTimer(self.metrics)
        prompt_tokens = len(gen.prompt_ids)
        # The deadline aborts the backend request from a timer: the iterator below may be resumed from
        # different tasks (first events, then the SSE writer), so no task-bound timeout is used.
        timed_out = False
        aborting: list[asyncio.Future[None]] = []

        def expire() -> None:
            nonlocal timed_out
            timed_out = True
            aborting.append(asyncio.ensure_future(self.backend.abort(gen.engine_request_id)))

        deadline = asyncio.get_running_loop().call_later(self.request_timeout_s, expire)
        stream = self.backend.generate(gen.engine_request_id, gen.prompt_ids, gen.params)
        try:
            async for delta in stream:
                i = delta.index
                engine_done[i] = engine_done[i] or delta.finished
                if done[i]:
                    continue
                proc = gen.processors[i]
                out: list[Any] = []
                if not readied[i]:
                    readied[i] = True
                    prompt_tokens = delta.prompt_tokens
                    out += proc.feed(updates.Ready(delta.prompt_tokens, delta.cached_tokens, self.fingerprint))
                timer.tokens_arrived(len(delta.token_ids), delta.queue_time_s)
                out += self._feed_tokens(proc, delta, eos)
                if getattr(proc, "finished", False):
                    done[i] = True
                    gen.finish_reasons[i] = "stop"
                elif delta.finished:
                    if delta.finish_reason == "dead_end":
                        raise ApiError(500, DEAD_END_MESSAGE, code="constraint_dead_end")
                    done[i] = True
                    reason = delta.finish_reason or "stop"
                    gen.finish_reasons[i] = reason
                    if reason != "abort":
                        out += proc.feed(updates.Finish(reason))
                if out:
                    if gen.response_fields:
                        self._set_response_fields(out, gen.response_fields)
                    yield [(i, e) for e in out]
                if all(done) or timed_out:
                    break
            if timed_out:
                raise GenerationTimeout()
            if not all(done):
                raise RuntimeError("the backend ended a request without finishing every sequence")
        except BackendQueueFull:
            raise queue_full(self.retry_after_s) from None
        except BackendRejected as exc:
            raise ApiError(400, str(exc)) from None
        except BackendUnavailable as exc:
            raise ApiError(503, str(exc)) from None
        finally:
            deadline.cancel()
            gen.release()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await asyncio.shield(aclose())
            if not all(engine_done):
                await asyncio.shield(self.backend.abort(gen.engine_request_id))
            for final_reason in gen.finish_reasons:
                timer.finished(final_reason or "abort", prompt_tokens)

    @staticmethod
    def _set_response_fields(events: list[Any], fields: dict[str, Any]) -> None:
        for event in events:
            obj = event.data.get("response")
            if isinstance(obj, dict):
                obj.update(fields)

    def _feed_tokens(self, proc: Any, delta: GenerationDelta, eos: frozenset[int]) -> list[Any]:
        ids = list(delta.token_ids)
        lps = delta.logprobs
        # An end-of-sequence id ends the output; it is never shown as text.
        if delta.finished and ids and ids[-1] in eos:
            ids.pop()
            if lps is not None:
                lps = lps[: len(ids)]
        if not ids:
            return []
        updates = self.parts.updates
        logprobs = None
        if lps is not None:
            logprobs = [updates.TokenLogprob(lp.logprob, list(lp.top)) for lp in lps]
        return list(proc.feed(updates.TokenUpdate(ids, logprobs)))
