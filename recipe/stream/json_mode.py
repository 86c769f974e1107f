"""JSON output mode (`response_format: json_object`): keep the JSON text, blank the prose around it.

Applied per backend chunk to the content pieces, after the text parser (rules matched against the
official reference):

* Before the JSON, prose is suppressed until a fence opener (```` ``` ```` or ```` ```json ```` plus newline) or a
  bare `{`/`[`. Every chunk-sized run that holds prose becomes one space `" "`; a run that may be part
  of a fence opener waits until that is decided. A bare start is sent as its own delta.
* The JSON text (after the opener, or after the bare start) passes until a closing `\\n` + ```` ``` ````,
  whatever the braces and strings in it; from there on everything is suppressed, one space per run
  that holds more than the fence.
* Stop sequences are matched in the JSON text only, up to and including the closing fence; prose never
  stops the answer. Matching comes before fence detection; a run that may begin a stop sequence waits.
  At a match the text before it passes, text held for a fence is released, and the filter ends
  (`stopped` holds the sequence).
* Text that may begin a closing fence waits, and is released in the chunk-sized runs it came in.
No JSON validation is done (that is the constraint engine's job).
"""

from __future__ import annotations

import re
from typing import Any

from recipe.stream.pieces import ContentPiece

LogprobEntries = tuple[dict[str, Any], ...] | None
_Run = tuple[str, LogprobEntries]

_SEEK, _PASS, _SUPPRESS, _STOPPED = range(4)
_FENCE_OPEN = re.compile(r"```(?:json)?\n")
_FENCE_OPENERS = ("```json\n", "```\n")
_FENCE_CLOSE = "\n```"


class JsonOutputFilter:
    """Stateful filter over the content pieces of successive chunks."""

    def __init__(self, stop_sequences: tuple[str, ...] = ()) -> None:
        self._stops = tuple(s for s in stop_sequences if s)
        self._stop_firsts = frozenset(s[0] for s in self._stops)
        self.stopped: str | None = None  # the stop sequence that ended the answer
        self._state = _SEEK
        self._seek_held: list[_Run] = []  # prose runs that may be part of a fence opener
        self._stop_held: list[_Run] = []  # JSON runs that may begin a stop sequence
        self._fence_held: list[_Run] = []  # JSON runs that may begin the closing fence
        self._fence_tail = ""  # the last characters of JSON text matched for stops (a fence may span runs)

    @property
    def passing(self) -> bool:
        """Whether text currently passes as the JSON answer (after its start, before a closing fence)."""
        return self._state == _PASS

    @property
    def seeking(self) -> bool:
        """Whether the JSON answer has not begun yet."""
        return self._state == _SEEK

    @property
    def phase(self) -> int:
        """The filter's state as a small int (a cache key for what the text parser looks for)."""
        return self._state

    def whole_run(self, text: str) -> str | None:
        """What a run `text` without logprobs becomes when that is decided by `text` alone: `text` itself
        (JSON text with no newline, no stop sequence's first character, nothing held), one space (prose
        with no fence or value start, nothing held), or None (`filter_piece` must decide). The state is
        advanced as `filter_piece` would advance it."""
        state = self._state
        if state == _PASS:
            if self._stop_held or self._fence_held or "\n" in text:
                return None
            if self._stops:
                # a closing fence needs a newline: none in `text`, none held at the end of the JSON so far
                if not self._stop_firsts.isdisjoint(text):
                    return None
                self._fence_tail = (self._fence_tail + text)[-(len(_FENCE_CLOSE) - 1) :]
            return text
        if state == _SEEK and not self._seek_held and "`" not in text and "{" not in text and "[" not in text:
            return " "
        return None

    def filter_piece(self, text: str, logprobs: LogprobEntries) -> list[ContentPiece]:
        """The content pieces that stand for one parsed content piece (every one carries its logprobs)."""
        return [ContentPiece(t, lp) for t, lp in self._filter(text, logprobs)]

    def value_start_in(self, text: str) -> int:
        """Where in `text` the JSON text would begin (after a fence opener or a bare `{`/`[`), if it
        does while seeking; else -1. State is unchanged."""
        if self._state != _SEEK:
            return -1
        base = "".join(run[0] for run in self._seek_held)
        start, end, _hold = _find_value_start(base + text)
        return end - len(base) if start >= 0 else -1

    def fence_end_in(self, text: str) -> int:
        """Where in `text` a closing fence ends, if it does; else -1. State is unchanged."""
        if self._state != _PASS:
            return -1
        # the JSON text seen so far ends in `base` (the stop stage sees it first, when there is one)
        base = self._fence_tail if self._stops else "".join(run[0] for run in self._fence_held)[-3:]
        k = (base + text).find(_FENCE_CLOSE)
        return -1 if k < 0 else k + len(_FENCE_CLOSE) - len(base)

    def break_prose(self) -> list[ContentPiece]:
        """A removed stray `</think>` (or the start of a tool-call block) splits the prose: text held as a possible fence opener cannot
        continue across it, so each of its runs becomes one space (as the reference restarts matching)."""
        out = [ContentPiece(" ", lp) for text, lp in self._seek_held if text]
        self._seek_held = []
        return out

    def finish(self) -> list[_Run]:
        """End of output: release held text."""
        out: list[_Run] = [(" ", lp) for text, lp in self._seek_held if text]
        self._seek_held = []
        held, self._stop_held = self._stop_held, []
        for run in held:
            out.extend(self._fence_stage(*run))
        out.extend(run for run in self._fence_held if run[0])
        self._fence_held = []
        return out

    # ---- one piece of content ------------------------------------------------------------------

    def _filter(self, text: str, lp: LogprobEntries) -> list[_Run]:
        out: list[_Run] = []
        if self._state == _SEEK:
            text = self._seek_stage(text, lp, out)
        if not text:
            return out
        if self._state == _PASS:
            out.extend(self._stop_stage(text, lp))
        elif self._state == _SUPPRESS:
            out.append((" ", lp))
        return out

    def _seek_stage(self, text: str, lp: LogprobEntries, out: list[_Run]) -> str:
        """Prose before the JSON; returns the text after the JSON start ("" while seeking)."""
        held = self._seek_held
        held.append((text, lp))
        joined = "".join(run[0] for run in held)
        start, end, hold = _find_value_start(joined)
        limit = start if start >= 0 else hold
        kept: list[_Run] = []
        pos = 0
        for run_text, run_lp in held:
            if start < 0 and pos + len(run_text) > hold:
                kept.append((run_text, run_lp))  # reaches into a possible fence opener
            elif pos < limit and run_text:
                out.append((" ", run_lp))  # holds prose
            pos += len(run_text)
        self._seek_held = kept
        if start < 0:
            return ""
        self._seek_held = []
        self._state = _PASS
        if joined[start] in "{[":
            out.append((joined[start], lp))
        return joined[end:]

    def _stop_stage(self, text: str, lp: LogprobEntries) -> list[_Run]:
        """Match stop sequences in JSON text, then hand the certain runs to fence detection."""
        if not self._stops:
            return self._fence_stage(text, lp)
        held = self._stop_held
        held.append((text, lp))
        end = self._closing_fence_end(text)
        joined = "".join(run[0] for run in held)
        if end >= 0:  # the JSON text ends inside this run: no match reaches past the closing fence
            joined = joined[: len(joined) - len(text) + end]
        best, best_end, best_stop = -1, -1, ""
        for stop in self._stops:  # the match that ends first wins; at a tie, the one listed first
            i = joined.find(stop)
            if i >= 0 and (best < 0 or i + len(stop) < best_end):
                best, best_end, best_stop = i, i + len(stop), stop
        out: list[_Run] = []
        if best >= 0:
            pos = 0
            for run_text, run_lp in held:
                if pos >= best:
                    break
                out.extend(self._fence_stage(run_text[: best - pos], run_lp))
                pos += len(run_text)
            out.extend(run for run in self._fence_held if run[0])
            self._stop_held = []
            self._fence_held = []
            self._state = _STOPPED
            self.stopped = best_stop
            return out
        keep = len(joined)
        if end < 0:
            for stop in self._stops:
                for k in range(min(len(stop) - 1, len(joined)), 0, -1):
                    if joined.endswith(stop[:k]):
                        keep = min(keep, len(joined) - k)
                        break
        pos = 0
        while held and pos + len(held[0][0]) <= keep:
            run = held.pop(0)
            pos += len(run[0])
            out.extend(self._fence_stage(*run))
        if end >= 0:
            self._stop_held = []
            for run in held:
                out.extend(self._fence_stage(*run))
        return out

    def _closing_fence_end(self, text: str) -> int:
        """Where in `text` the closing fence ends (seen by the stop stage); -1 if it does not."""
        joined = self._fence_tail + text
        self._fence_tail = joined[-(len(_FENCE_CLOSE) - 1) :]
        k = joined.find(_FENCE_CLOSE)
        return -1 if k < 0 else k + len(_FENCE_CLOSE) - (len(joined) - len(text))

    def _fence_stage(self, text: str, lp: LogprobEntries) -> list[_Run]:
        """JSON text: watch for the closing fence, hold what may begin one."""
        if not text:
            return []
        if self._state == _SUPPRESS:
            return [(" ", lp)]
        held = self._fence_held
        held.append((text, lp))
        joined = "".join(run[0] for run in held)
        k = joined.find(_FENCE_CLOSE)
        out: list[_Run] = []
        if k >= 0:
            pos = 0
            for run_text, run_lp in held:
                if pos >= k:
                    break
                if run_text[: k - pos]:
                    out.append((run_text[: k - pos], run_lp))
                pos += len(run_text)
            self._fence_held = []
            self._state = _SUPPRESS
            if joined[k + len(_FENCE_CLOSE) :]:
                out.append((" ", lp))
            return out
        keep = len(joined)
        for size in range(min(len(_FENCE_CLOSE) - 1, len(joined)), 0, -1):
            if joined.endswith(_FENCE_CLOSE[:size]):
                keep = len(joined) - size
                break
        pos = 0
        while held and pos + len(held[0][0]) <= keep:
            run = held.pop(0)
            pos += len(run[0])
            out.append(run)
        return out


def _find_value_start(text: str) -> tuple[int, int, int]:
    """(start, end, hold) of the first JSON start in prose `text`: a fence opener `[start, end)` or a
    bare `{`/`[` at `start` (end = start + 1); (-1, -1, hold) if none, where `text[hold:]` may still
    become a fence opener (hold = len(text) when nothing may)."""
    i = text.find("`")
    j = min((k for k in (text.find("{"), text.find("[")) if k >= 0), default=-1)
    while i >= 0 and (j < 0 or i < j):
        m = _FENCE_OPEN.match(text, i)
        if m:
            return i, m.end(), len(text)
        tail = text[i:]
        if any(o.startswith(tail) for o in _FENCE_OPENERS):
            return -1, -1, i
        i = text.find("`", i + 1)
    if j >= 0:
        return j, j + 1, len(text)
    return -1, -1, len(text)
