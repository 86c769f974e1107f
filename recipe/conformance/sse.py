"""A tolerant Server-Sent Events parser (CRLF or LF, `data:` with or without a space, comment lines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event: its `event:` name (None when the line is absent) and its joined `data:` text."""

    event: str | None
    data: str

    @property
    def is_done(self) -> bool:
        return self.data.strip() == "[DONE]"

    def json(self) -> Any:
        """The data parsed as JSON; raises ValueError when it is not JSON."""
        return orjson.loads(self.data)


def parse_sse(raw: bytes) -> list[SseEvent]:
    """Split a complete SSE body into events, following the WHATWG dispatch rules."""
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    events: list[SseEvent] = []
    name: str | None = None
    data: list[str] = []
    for line in text.split("\n"):
        if line == "":
            if data:
                events.append(SseEvent(name, "\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if data:
        events.append(SseEvent(name, "\n".join(data)))
    return events
