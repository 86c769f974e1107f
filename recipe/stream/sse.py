"""Protocol events and their Server-Sent Events framing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

DONE_FRAME = b"data: [DONE]\n\n"
_EVENT_HEADS: dict[str, bytes] = {}  # SSE event name -> its `event:` line and the `data: ` prefix


class Event:
    """One protocol event: `data` is the JSON payload, `name` the SSE event name (None for Chat chunks).

    `done=True` marks Chat's terminal `data: [DONE]` frame (its `data` is empty and not accumulated).
    An event built on the per-token path holds its whole SSE frame (`frame`, from a `JsonTemplate`) or its
    JSON bytes (`raw`), and parses `data` only when someone reads it; from then on `data` is the truth (a
    caller may update it, as a server adding response fields does) and `sse()` renders from it.
    """

    __slots__ = ("_data", "_frame", "_raw", "done", "name")

    def __init__(self, name: str | None, data: dict[str, Any] | None = None, done: bool = False,
                 raw: bytes | None = None, frame: bytes | None = None) -> None:
        self.name = name
        self._data = data
        self._raw = raw
        self._frame = frame
        self.done = done

    @staticmethod
    def from_frame(frame: bytes) -> Event:
        """The event of an SSE frame that `sse()` gave (`event: <name>` line or none, `data: <json>`)."""
        name = frame[7 : frame.index(b"\n")].decode() if frame.startswith(b"event: ") else None
        return Event(name, None, False, None, frame)

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            raw = self.raw
            self._data = orjson.loads(raw) if raw is not None else {}
        self._raw = None  # the caller may change `data`: render from it from now on
        self._frame = None
        return self._data

    @property
    def raw(self) -> bytes | None:
        """The JSON bytes of an event built on the per-token path, until someone reads `data`; else None."""
        if self._raw is None and self._frame is not None:
            self._raw = self._frame[len(frame_head(self.name)) : -2]
        return self._raw

    @property
    def frame(self) -> bytes | None:
        """The SSE frame of an event built from a template, until someone reads `data`; else None."""
        return self._frame

    def json(self) -> bytes:
        raw = self.raw
        if raw is not None:
            return raw
        return orjson.dumps(self._data if self._data is not None else {})

    def sse(self) -> bytes:
        """One SSE frame: `event: <name>` (when the API names events), `data: <json>`, blank line."""
        if self._frame is not None:
            return self._frame
        if self.done:
            return DONE_FRAME
        return frame_head(self.name) + self.json() + b"\n\n"

    def __repr__(self) -> str:
        return f"Event({self.name!r}, {self.data!r}{', done=True' if self.done else ''})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.name, self.done, self.data) == (other.name, other.done, other.data)

    __hash__ = None  # type: ignore[assignment]


def frame_head(name: str | None) -> bytes:
    """What precedes the JSON in an SSE frame: the `event:` line (for a named event) and `data: `."""
    if not name:
        return b"data: "
    head = _EVENT_HEADS.get(name)
    if head is None:
        head = _EVENT_HEADS[name] = b"event: " + name.encode() + b"\ndata: "
    return head


class JsonTemplate:
    """The SSE frame of an event (`name`, None for Chat) whose payload is fixed but for a few values,
    rendered without building dicts.

    `template` is the payload with each variable replaced by a unique placeholder string from `slots`;
    `render(*values)` gives exactly `Event(name, payload).sse()` with the values in place, which
    `Event(name, frame=...)` sends as it is.
    """

    def __init__(self, template: dict[str, Any], slots: Sequence[str], name: str | None = None) -> None:
        raw = orjson.dumps(template)
        parts = [raw]
        for slot in slots:
            marker = orjson.dumps(slot)
            head, sep, tail = parts[-1].partition(marker)
            if not sep or marker in tail:
                raise ValueError(f"placeholder {slot!r} must occur exactly once in the template")
            parts[-1:] = [head, tail]
        parts[0] = frame_head(name) + parts[0]
        parts[-1] = parts[-1] + b"\n\n"
        self._parts = parts

    def render1(self, value: Any) -> bytes:
        """`render` for a one-placeholder template."""
        head, tail = self._parts
        return head + orjson.dumps(value) + tail

    def render2(self, first: Any, second: Any) -> bytes:
        """`render` for a two-placeholder template."""
        head, middle, tail = self._parts
        return head + orjson.dumps(first) + middle + orjson.dumps(second) + tail

    def render(self, *values: Any) -> bytes:
        parts = self._parts
        out = [parts[0]]
        for value, part in zip(values, parts[1:], strict=True):
            out.append(orjson.dumps(value))
            out.append(part)
        return b"".join(out)


def done_event() -> Event:
    return Event(None, {}, done=True)


def render_sse(events: list[Event]) -> bytes:
    """The SSE bytes of a whole event list."""
    return b"".join(e.sse() for e in events)
