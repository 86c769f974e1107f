"""JSON output mode (`response_format: json_object`): keep the JSON value, blank the prose around it.

Applied per backend chunk to the content pieces, after the text parser (rules matched against the
official reference):

* Before the value, text is suppressed until a fence opener (```` ``` ```` or ```` ```json ```` plus newline) or a
  bare `{`/`[`. A bare start is sent as its own delta, the rest of the chunk as the next one.
* After a fence opener everything passes until a closing `\\n` + ```` ``` ````; after a bare value (braces matched,
  strings respected) everything passes too, unless `\\n` + ```` ``` ```` follows. From a closing fence on,
  everything is suppressed.
* In each chunk, every suppressed run that holds more than fence markers becomes one space `" "`.
* Text that may be the start of a fence is held back and released in the chunk-sized runs it came in.
No JSON validation is done (that is the constraint engine's job).
"""

from __future__ import annotations

import re
from typing import Any

from recipe.stream.pieces import ContentPiece, Piece

LogprobEntries = tuple[dict[str, Any], ...] | None

_SEEK, _BARE, _PASS, _SUPPRESS = range(4)
_FENCE_OPEN = re.compile(r"```(?:json)?\n")
_FENCE_OPENERS = ("```json\n", "```\n")
_FENCE_CLOSE = "\n```"


class JsonOutputFilter:
    """Stateful filter over the content pieces of successive chunks."""

    def __init__(self) -> None:
        self._state = _SEEK
        self._seek = ""  # unconsumed text while seeking (a partial fence opener)
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._held: list[str] = []  # passing text held back (may precede a closing fence)
        self._held_lp: list[LogprobEntries] = []
        self._lp: LogprobEntries = None  # logprobs of the piece being filtered (every output of it carries them)

    @property
    def passing(self) -> bool:
        """Whether text currently passes as the JSON answer (inside or after the value, before a fence)."""
        return self._state in (_BARE, _PASS)

    def filter_piece(self, text: str, logprobs: LogprobEntries) -> list[Piece]:
        """The content pieces that stand for one parsed content piece (every one carries its logprobs)."""
        self._lp = logprobs
        return [ContentPiece(t, lp) for t, lp in self._filter(text)]

    def fence_end_in(self, text: str) -> int:
        """Where in `text` a closing fence (after the value) ends, if it does; else -1. State is unchanged."""
        start = 0
        if self._state == _BARE:
            saved = (self._depth, self._in_string, self._escape)
            consumed = self._scan_value(text)
            closed = self._depth == 0
            self._depth, self._in_string, self._escape = saved
            if not closed:
                return -1
            start = consumed
            base = ""
        elif self._state == _PASS:
            base = "".join(self._held)
        else:
            return -1
        joined = base + text[start:]
        k = joined.find(_FENCE_CLOSE, 0)
        if k < 0:
            return -1
        return k + len(_FENCE_CLOSE) - len(base) + start

    # ---- one piece of content ------------------------------------------------------------------

    def _filter(self, text: str) -> list[tuple[str, LogprobEntries]]:
        out: list[str] = []
        passing: list[str] = []  # text of this piece that passes (one segment)
        rest = text
        while rest:
            if self._state == _SEEK:
                rest = self._seek_step(rest, out)
                continue
            if self._state == _BARE:
                consumed = self._scan_value(rest)
                passing.append(rest[:consumed])
                rest = rest[consumed:]
                if self._depth == 0:
                    self._state = _PASS
                    self._watch_start = len("".join(passing))
                continue
            if self._state == _PASS:
                passing.append(rest)
                rest = ""
                continue
            # _SUPPRESS
            out.append(" ")
            rest = ""
        result = [(t, self._lp) for t in out if t]
        if passing:
            result.extend(self._pass("".join(passing)))
        return result

    def _seek_step(self, rest: str, out: list[str]) -> str:
        text = self._seek + rest
        self._seek = ""
        i = 0
        n = len(text)
        while i < n:
            ch = text[i]
            if ch == "`":
                tail = text[i:]
                m = _FENCE_OPEN.match(tail)
                if m:
                    if i:
                        out.append(" ")
                    self._state = _PASS
                    self._fenced_pass_start = True
                    self._watch_start = 0
                    return tail[m.end() :] or ""
                if any(o.startswith(tail) for o in _FENCE_OPENERS):
                    if i:
                        out.append(" ")
                    self._seek = tail
                    return ""
            elif ch in "{[":
                if i:
                    out.append(" ")
                out.append(ch)
                self._state = _BARE
                self._depth = 1
                self._in_string = False
                self._escape = False
                return text[i + 1 :]
            i += 1
        if text:
            out.append(" ")
        return ""

    def _scan_value(self, text: str) -> int:
        """Consume value characters up to (and including) the one that closes the value."""
        for i, ch in enumerate(text):
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1
        return len(text)

    def _pass(self, segment: str) -> list[tuple[str, LogprobEntries]]:
        """Passing text: watch for a closing fence after the value, hold what may start one."""
        if self._state == _BARE:
            return [(segment, self._lp)]
        watch = getattr(self, "_watch_start", 0)
        self._watch_start = 0
        held_len = sum(len(h) for h in self._held)
        self._held.append(segment)
        self._held_lp.append(self._lp)
        joined = "".join(self._held)
        k = joined.find(_FENCE_CLOSE, held_len + watch if not held_len else 0)
        if k < 0 and held_len:
            k = joined.find(_FENCE_CLOSE)
        if k >= 0:
            out = self._cut(k)
            self._held = []
            self._held_lp = []
            self._state = _SUPPRESS
            if joined[k + len(_FENCE_CLOSE) :]:
                out.append((" ", self._lp))
            return out
        hold = len(joined)
        for size in range(min(len(_FENCE_CLOSE) - 1, len(joined)), 0, -1):
            if joined.endswith(_FENCE_CLOSE[:size]) and len(joined) - size >= (held_len + watch if not held_len else 0):
                hold = len(joined) - size
                break
        out = []
        pos = 0
        while self._held and pos + len(self._held[0]) <= hold:
            pos += len(self._held[0])
            out.append((self._held.pop(0), self._held_lp.pop(0)))
        return [o for o in out if o[0]]

    def _cut(self, k: int) -> list[tuple[str, LogprobEntries]]:
        out: list[tuple[str, LogprobEntries]] = []
        pos = 0
        for seg, lp in zip(self._held, self._held_lp, strict=True):
            if pos >= k:
                break
            if seg[: k - pos]:
                out.append((seg[: k - pos], lp))
            pos += len(seg)
        return out

    def finish(self) -> list[tuple[str, LogprobEntries]]:
        """End of output: release held text."""
        out = [(h, lp) for h, lp in zip(self._held, self._held_lp, strict=True) if h]
        self._held = []
        self._held_lp = []
        return out
