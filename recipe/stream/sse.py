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
    An event built on the per-token path holds its JSON bytes (`raw`) and parses `data` only when
    someone reads it; from then on `data` is the truth (a caller may update it, as a server adding
    response fields does) and `sse()` renders from it.
    """

    __slots__ = ("_data", "_raw", "done", "name")

    def __init__(self, name: str | None, data: dict[str, Any] | None = None, done: bool = False,
                 raw: bytes | None = None) -> None:
        self.name = name
        self._data = data
        self._raw = raw
        self.done = done

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            self._data = orjson.loads(self._raw) if self._raw is not None else {}
        self._raw = None  # the caller may change `data`: render from it from now on
        return self._data

    @property
    def raw(self) -> bytes | None:
        """The JSON bytes of an event built on the per-token path, until someone reads `data`; else None."""
        return self._raw

    def json(self) -> bytes:
        if self._raw is not None:
            return self._raw
        return orjson.dumps(self._data if self._data is not None else {})

    def sse(self) -> bytes:
        """One SSE frame: `event: <name>` (when the API names events), `data: <json>`, blank line."""
        if self.done:
            return DONE_FRAME
        name = self.name
        raw = self._raw if self._raw is not None else self.json()
        if name:
            head = _EVENT_HEADS.get(name)
            if head is None:
                head = _EVENT_HEADS[name] = b"event: " + name.encode() + b"\ndata: "
            return head + raw + b"\n\n"
        return b"data: " + raw + b"\n\n"

    def __repr__(self) -> str:
        return f"Event({self.name!r}, {self.data!r}{', done=True' if self.done else ''})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.name, self.done, self.data) == (other.name, other.done, other.data)

    __hash__ = None  # type: ignore[assignment]


class JsonTemplate:
    """The JSON bytes of a fixed payload with a few variable values, rendered without building dicts.

    `template` is the payload with each variable replaced by a unique placeholder string from `slots`;
    `render(*values)` gives exactly `orjson.dumps(payload)` with the values in place.
    """

    def __init__(self, template: dict[str, Any], slots: Sequence[str]) -> None:
        raw = orjson.dumps(template)
        parts = [raw]
        for slot in slots:
            marker = orjson.dumps(slot)
            head, sep, tail = parts[-1].partition(marker)
            if not sep or marker in tail:
                raise ValueError(f"placeholder {slot!r} must occur exactly once in the template")
            parts[-1:] = [head, tail]
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
