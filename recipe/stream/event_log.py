"""`EventLog`: the events a processor has emitted, kept for its complete response.

A processor keeps every event it sends (the complete response is their accumulation), thousands per
response. An `Event` object is tracked by the garbage collector for as long as the stream lives, so each
one kept brings the collector's full passes (which scan every tracked object in the process) nearer. A
per-token event holds only its SSE frame; the log keeps just those bytes, which the collector never
tracks. Events with a payload dict are kept as they are (a caller may still change such an event, and
the response then accumulates the change). `events()` gives equal events either way;
`EventLog.compact = False` keeps every object (tests compare the two).
"""

from __future__ import annotations

from typing import ClassVar

from recipe.stream.sse import Event


class EventLog:
    """Append-only list of emitted events (see module docstring)."""

    compact: ClassVar[bool] = True

    def __init__(self) -> None:
        self._items: list[Event | bytes] = []
        self._compact = self.compact

    def extend(self, events: list[Event]) -> None:
        items = self._items
        if not self._compact:
            items.extend(events)
            return
        for event in events:
            frame = event.frame
            items.append(event if frame is None else frame)

    def events(self) -> list[Event]:
        """The logged events in order (per-token ones rebuilt from their frames: equal, not the same objects)."""
        return [item if isinstance(item, Event) else Event.from_frame(item) for item in self._items]
