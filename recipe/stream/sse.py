"""Protocol events and their Server-Sent Events framing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

DONE_FRAME = b"data: [DONE]\n\n"


@dataclass(slots=True)
class Event:
    """One protocol event: `data` is the JSON payload, `name` the SSE event name (None for Chat chunks).

    `done=True` marks Chat's terminal `data: [DONE]` frame (its `data` is empty and not accumulated).
    Slotted rather than frozen for speed (one per token); treat it as immutable.
    """

    name: str | None
    data: dict[str, Any]
    done: bool = False

    def json(self) -> bytes:
        return orjson.dumps(self.data)

    def sse(self) -> bytes:
        """One SSE frame: `event: <name>` (when the API names events), `data: <json>`, blank line."""
        if self.done:
            return DONE_FRAME
        if self.name:
            return b"".join((b"event: ", self.name.encode(), b"\ndata: ", orjson.dumps(self.data), b"\n\n"))
        return b"".join((b"data: ", orjson.dumps(self.data), b"\n\n"))


def done_event() -> Event:
    return Event(None, {}, done=True)


def render_sse(events: list[Event]) -> bytes:
    """The SSE bytes of a whole event list."""
    return b"".join(e.sse() for e in events)
