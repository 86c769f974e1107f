"""DSML tool-call markup parser (DeepSeek V4 `<｜DSML｜tool_calls>` and V4.1 `<｜DSML｜ calls>` forms).

Fed the output text from the first `<｜DSML｜` on, it emits each `invoke` as a `ToolCallStart` and its
parameters as JSON object text, incrementally. Model output is untrusted, so the parser is the
reference's recovery rule rather than an XML reader: a stage machine that in each stage looks only for
a few fixed strings anywhere in the text, and treats everything else by the stage's default.

| stage       | looks for (first match wins)                    | on match                 | other text     |
| ----------- | ----------------------------------------------- | ------------------------ | -------------- |
| block       | `invoke name="`; `</｜DSML｜tool_calls>`, `</｜DSML｜ calls>` | name / block done | dropped |
| name        | `"`                                             | the call starts          | the name       |
| arguments   | `parameter name=`; `</｜DSML｜`                  | `{` or `, `; `{}` or `}` | dropped        |
| key         | a space                                         | `: `                     | copied         |
| type        | `true">`; `false">`                             | `"`; nothing             | dropped        |
| value       | `</｜DSML｜`                                     | `"` for a string value   | copied / JSON-escaped |

So the key is copied as written (its quotes included) up to the first space, a malformed attribute
is skipped until the next `true">`/`false">`, stray text between tags is dropped, any closing DSML
tag ends a value or an invoke, tags of either model version are accepted, a block cut short leaves
its arguments unterminated, and everything after the block's closing tag is discarded.

Emission matches the reference's streaming matcher. At the end of a feed, text that may still begin a
match (the longest end of the buffer that is a proper prefix of a searched string) is held back. Copied
argument text is grouped by the feed it arrived in: one piece per feed's run, sent when a match ends
the run or once all of that feed's text has been released (so a run whose feed still has held-back
text waits); a match's own text is sent at once.
"""

from __future__ import annotations

import re
from collections import deque
from typing import ClassVar

import orjson

from recipe.stream.call_ids import new_call_id
from recipe.stream.pieces import Piece, ToolCallArguments, ToolCallStart
from recipe.stream.token_markers import unmask

DSML = "｜DSML｜"
OPEN = "<" + DSML
CLOSE = "</" + DSML

# stages
_BLOCK, _NAME, _ARGS_FIRST, _ARGS_NEXT, _KEY, _TYPE, _STRING, _RAW, _DONE = range(9)
# what a stage does with text that matches none of its strings
_DROP, _NAME_TEXT, _COPY, _ESCAPE = range(4)
_DEFAULT = {_BLOCK: _DROP, _NAME: _NAME_TEXT, _ARGS_FIRST: _DROP, _ARGS_NEXT: _DROP, _KEY: _COPY, _TYPE: _DROP,
            _STRING: _ESCAPE, _RAW: _COPY, _DONE: _DROP}


def _escape_json_fragment(text: str) -> str:
    """`text` JSON-escaped as the inside of a string literal (no quotes)."""
    return orjson.dumps(text).decode()[1:-1]


def _branches(dsml: str) -> dict[int, tuple[tuple[str, int, str | None], ...]]:
    """Per stage: (searched string, next stage, argument text emitted on the match) in priority order."""
    close = "</" + dsml
    return {
        _BLOCK: (('invoke name="', _NAME, None), (close + "tool_calls>", _DONE, None), (close + " calls>", _DONE, None)),
        _NAME: (('"', _ARGS_FIRST, None),),
        _ARGS_FIRST: (("parameter name=", _KEY, "{"), (close, _BLOCK, "{}")),
        _ARGS_NEXT: (("parameter name=", _KEY, ", "), (close, _BLOCK, "}")),
        _KEY: ((" ", _TYPE, ": "),),
        _TYPE: (('true">', _STRING, '"'), ('false">', _RAW, None)),
        _STRING: ((close, _ARGS_NEXT, '"'),),
        _RAW: ((close, _ARGS_NEXT, None),),
        _DONE: (),
    }


def _first_char_patterns(
    table: dict[int, tuple[tuple[str, int, str | None], ...]],
) -> dict[int, re.Pattern[str] | None]:
    """Per stage: a pattern of the first characters of its searched strings (None: it searches none)."""
    return {stage: re.compile("[" + re.escape("".join(sorted({b[0][0] for b in branches}))) + "]") if branches else None
            for stage, branches in table.items()}


class DsmlToolCallParser:
    """Incremental DSML parser; `feed(text)` returns the pieces completed by that text."""

    find_partials: ClassVar[bool] = True  # held-back ends found by `str.find` (off: every length tested; equal results)
    # A feed with nothing held or pending and none of the stage's first characters in it is released
    # whole, without the search loop (off: the general loop; the fast-path test proves them equal).
    fast_path: ClassVar[bool] = True

    def __init__(self, dsml: str = DSML) -> None:
        self._table = _branches(dsml)
        self._firsts = _first_char_patterns(self._table)
        self._searched = {stage: [b[0] for b in branches] for stage, branches in self._table.items()}
        self._stage = _BLOCK
        self._held = ""  # text that may begin a match, carried to the next feed
        self._name = ""
        self._calls = 0
        self._pos = 0  # characters released or matched so far
        self._total = 0  # characters fed so far
        self._ends: deque[int] = deque()  # end offsets of the feeds whose text is not all released
        self._run = ""  # copied argument text of the current feed's run, not sent yet

    @property
    def done(self) -> bool:
        return self._stage == _DONE

    @property
    def call_count(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Piece]:
        out: list[Piece] = []
        if self._stage == _DONE or not text:
            return out
        released = self.feed_whole(text)
        if released is not None:
            if released:
                out.append(ToolCallArguments(self._calls - 1, released))
            return out
        self._total += len(text)
        self._ends.append(self._total)
        buf = self._held + text
        table = self._table
        while True:
            branches = table[self._stage]
            best_end = -1
            best: tuple[str, int, str | None] | None = None
            for branch in branches:
                i = buf.find(branch[0])
                if i >= 0 and (best_end < 0 or i + len(branch[0]) < best_end):
                    best_end = i + len(branch[0])
                    best = branch
            if best is None:
                break
            self._other(buf[: best_end - len(best[0])], out)
            self._matched(best[1], best[2], len(best[0]), out)
            buf = buf[best_end:]
            if self._stage == _DONE:
                self._held = ""
                return out
        hold = (partial_length if self.find_partials else partial_length_by_length)(buf, self._searched[self._stage])
        self._other(buf[: len(buf) - hold], out)
        self._held = buf[len(buf) - hold :]
        return out

    def finish(self) -> list[Piece]:
        """End of output: held text is released as the stage's other text (a cut block stays unterminated)."""
        out: list[Piece] = []
        if self._held and self._stage != _DONE:
            self._other(self._held, out)
        self._flush(out)
        self._held = ""
        return out

    # ---- emission ----------------------------------------------------------------------------

    def feed_whole(self, text: str) -> str | None:
        """`feed(text)` when `text` alone decides it: nothing held or pending and none of the stage's
        searched strings' first characters in `text`, so nothing matches and nothing is held back. Returns
        the argument text of the one `ToolCallArguments` that `feed` gives ("" for none), or None when
        `feed` must decide (then the state is unchanged)."""
        stage = self._stage
        if not self.fast_path or self._held or self._pos != self._total or self._run or stage == _DONE:
            return None
        first = self._firsts[stage]
        if first is None or first.search(text) is not None:
            return None
        n = len(text)
        self._total += n
        self._pos += n
        action = _DEFAULT[stage]
        if action == _DROP:
            return ""
        if action == _NAME_TEXT:
            self._name += text
            return ""
        text = unmask(text)
        return _escape_json_fragment(text) if action == _ESCAPE else text

    def _other(self, text: str, out: list[Piece]) -> None:
        """Released text that matched nothing: dropped, part of the name, or argument text."""
        if not text:
            return
        action = _DEFAULT[self._stage]
        if action in (_DROP, _NAME_TEXT):
            if action == _NAME_TEXT:
                self._name += text
            self._advance(len(text))
            return
        ends = self._ends
        while text:
            take = ends[0] - self._pos
            part = text[:take]
            text = text[take:]
            self._run += part
            self._pos += len(part)
            if self._pos == ends[0]:
                ends.popleft()
                self._flush(out)

    def _flush(self, out: list[Piece]) -> None:
        """Send the pending run of argument text as one piece."""
        if self._run:
            text = unmask(self._run)
            if _DEFAULT[self._stage] == _ESCAPE:
                text = _escape_json_fragment(text)
            out.append(ToolCallArguments(self._calls - 1, text))
            self._run = ""

    def _advance(self, n: int) -> None:
        self._pos += n
        ends = self._ends
        while ends and ends[0] <= self._pos:
            ends.popleft()

    def _matched(self, stage: int, label: str | None, length: int, out: list[Piece]) -> None:
        self._flush(out)
        if self._stage == _NAME:
            out.append(ToolCallStart(self._calls, new_call_id(self._calls), unmask(self._name)))
            self._calls += 1
            self._name = ""
        elif label is not None:
            out.append(ToolCallArguments(self._calls - 1, label))
        self._stage = stage
        self._advance(length)


def partial_length(buf: str, patterns: list[str]) -> int:
    """Length of the longest end of `buf` that is a proper prefix of one of `patterns`.

    Only ends that begin with a pattern's first character can match, so those are found with `str.find`
    instead of testing every length (`partial_length_by_length`, the off switches
    `DsmlToolCallParser.find_partials = False` and `OutputTextParser.fast_path = False`; a property test
    proves them equal)."""
    hold = 0
    n = len(buf)
    for pattern in patterns:
        first = pattern[0]
        j = buf.find(first, max(n - len(pattern) + 1, 0))  # longest candidate end first
        while j >= 0 and n - j > hold:
            if pattern.startswith(buf[j:]):
                hold = n - j
                break
            j = buf.find(first, j + 1)
    return hold


def partial_length_by_length(buf: str, patterns: list[str]) -> int:
    """`partial_length`, testing each length from the longest down."""
    hold = 0
    for pattern in patterns:
        for k in range(min(len(pattern) - 1, len(buf)), hold, -1):
            if buf.endswith(pattern[:k]):
                hold = k
                break
    return hold
