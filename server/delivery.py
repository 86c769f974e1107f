"""How a prepared generation reaches the client: an SSE stream of the processors' events, or one JSON body.

Streams are started before the response headers go out: the first events (or the first failure, such as an
engine queue that is full) are awaited first, so a request that cannot run still gets a proper status code.
After the headers, failures close the stream with the API's own mid-stream error events.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from recipe.server.chat_spec import ChatUsageFraming
from recipe.server.errors import ApiError
from recipe.server.pipeline import Generation, GenerationTimeout, Pipeline
from recipe.server.sse import SSEResponse, until_disconnect
from recipe.server.state import state_of
from starlette.requests import Request
from starlette.responses import Response

from recipe.stream.sse import done_event

log = logging.getLogger("recipe.server")

TIMEOUT_MESSAGE = "The request timed out before generation finished."
FAILED_MESSAGE = "The server had an error while generating; see the server log for this request id."

STALL_BACKSTOP_SLACK_S = 2.5

# Called with the generation once every choice has finished normally (Responses storage uses it).
OnComplete = Callable[[Generation], Awaitable[None]]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _frame(event: Any) -> bytes:
    return bytes(event.sse())


def _chat_framer(gen: Generation) -> Callable[[Any], bytes]:
    """Frames Chat events with OpenAI's usage framing (see `ChatUsageFraming`)."""
    framing = ChatUsageFraming(bool(gen.request.include_usage))

    def frame(event: Any) -> bytes:
        raw = bytes(event.sse())
        if event.done:
            usage = framing.usage_chunk()
            return (b"data: " + orjson.dumps(usage) + b"\n\n" if usage is not None else b"") + raw
        # Only a chunk with a usage or logprobs object needs rewriting; the rest keep their pre-rendered bytes.
        if event.name is None and (b'"usage":{' in raw or b'"logprobs":{' in raw):
            return b"data: " + orjson.dumps(framing.chunk(event.data)) + b"\n\n"
        return raw

    return frame


def _done_frames(gen: Generation, frame: Callable[[Any], bytes]) -> list[bytes]:
    """Chat with several choices ends with one `[DONE]` after all of them (each processor omits its own)."""
    if gen.api == "chat" and len(gen.processors) > 1:
        return [frame(done_event())]
    return []




async def stream_response(
    request: Request, pipeline: Pipeline, gen: Generation, on_complete: OnComplete | None = None
) -> Response:
    """Start the generation, wait for its first events, then stream the rest as SSE."""
    batches = pipeline.run(gen)
    request_id = request.state.request_id
    try:
        first = await until_disconnect(request.receive, anext(batches, None))
    except GenerationTimeout:
        await batches.aclose()
        raise ApiError(504, TIMEOUT_MESSAGE) from None
    except BaseException:
        await batches.aclose()
        gen.release()
        raise

    frame = _chat_framer(gen) if gen.api == "chat" else _frame

    async def frames() -> AsyncIterator[bytes]:
        try:
            # One write per backend delta: the events it produced go out together.
            if first is not None:
                yield b"".join(frame(event) for _, event in first)
                async for batch in batches:
                    yield b"".join(frame(event) for _, event in batch)
            for done in _done_frames(gen, frame):
                yield done
            if on_complete is not None:
                await on_complete(gen)
        except GenerationTimeout:
            yield b"".join(_frame(event) for event in gen.processors[0].error_events(TIMEOUT_MESSAGE))
        except ApiError as exc:
            yield b"".join(_frame(event) for event in gen.processors[0].error_events(exc.message))
        except Exception:
            log.exception("request %s failed mid-stream", request_id)
            yield b"".join(_frame(event) for event in gen.processors[0].error_events(FAILED_MESSAGE))
        finally:
            await batches.aclose()
            gen.release()

    # The connection's watchdog (http_protocol.py) drops a stalled peer after the stall timeout; this is the
    # backstop under servers without it, a little later so that the watchdog normally goes first.
    stall = state_of(request).config.stream_stall_timeout_s + STALL_BACKSTOP_SLACK_S
    return SSEResponse(frames(), stall_timeout_s=stall)


async def collect(request: Request, pipeline: Pipeline, gen: Generation) -> None:
    """Run to the end (aborting if the client leaves); the processors then hold the complete responses."""

    async def run_all() -> None:
        async for _ in pipeline.run(gen):
            pass

    try:
        await until_disconnect(request.receive, run_all())
    except GenerationTimeout:
        raise ApiError(504, TIMEOUT_MESSAGE) from None
    finally:
        gen.release()
