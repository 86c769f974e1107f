"""The output text state machine: reasoning, answer content, tool-call markup, JSON mode, stop sequences.

Fed one backend chunk at a time, `OutputTextParser` returns the `Piece`s that are certain. Rules
(codec-spec §4.2, matched event by event against the official reference):

* Reasoning runs until the first `</think>`; `ReasoningStart` drops its leading newlines, newlines
  right before `</think>` are dropped. Content then drops its leading newlines (also at the very start
  when thinking is off, but not for `ContentContinuation`); a dropped newline ends the output only for
  the stop sequence `"\n"` itself. Any later `</think>` is removed, and no match spans it.
* The first tool-call opener (`<｜DSML｜`, or `<tool_call>` for ChatML) in reasoning or content starts the
  tool-call region; newlines directly before it are dropped. DeepSeek-R1 (`deepseek_r1`) has `</think>`
  and no tool-call opener.
* Stop sequences apply to content only (in JSON mode to the JSON text only, see `json_mode`). The match
  that ends first wins; at a tie a stop sequence beats `</think>` and the tool opener, and the stop
  listed first beats the others. Nothing after the stop leaks.
* With token ids, special tokens are sentinels (`token_markers`): opaque to stop sequences.
* Text that may still become part of a marker (a partial `</think>`, tool opener or stop sequence, or
  newlines that may precede a tool block or `</think>`) is held back. Held text is released in the
  chunk-sized runs it arrived in, so the grouping of deltas equals the reference's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Literal, Protocol

from recipe.conversation import ParsingOptions, ThinkingInitialStage
from recipe.stream.chatml_tools import ChatMLToolCallParser
from recipe.stream.dsml import DSML, DsmlToolCallParser, partial_length
from recipe.stream.dsml import OPEN as DSML_OPEN
from recipe.stream.json_mode import JsonOutputFilter
from recipe.stream.pieces import ContentPiece, Piece, ReasoningPiece
from recipe.stream.token_markers import DSML_SENTINEL, THINK_END_SENTINEL, unmask

THINK_END = "</think>"
OutputFormat = Literal["deepseek_v4", "deepseek_v41", "deepseek_r1", "chatml"]
LogprobEntries = tuple[dict[str, Any], ...] | None
_Segment = tuple[str, LogprobEntries]


class ToolCallParser(Protocol):
    @property
    def done(self) -> bool: ...

    @property
    def call_count(self) -> int: ...

    def feed(self, text: str) -> list[Piece]: ...

    def finish(self) -> list[Piece]: ...


@dataclass(frozen=True)
class OutputMarkup:
    """The spellings the parser looks for in one model family's output."""

    think_end: str | None
    tool_open: str | None

    @staticmethod
    def for_format(output_format: str) -> OutputMarkup:
        if output_format == "chatml":
            return OutputMarkup(think_end=None, tool_open="<tool_call>")
        if output_format in ("deepseek_v4", "deepseek_v41"):
            return OutputMarkup(think_end=THINK_END, tool_open=DSML_OPEN)
        if output_format == "deepseek_r1":  # R1's reasoning split is V4's; it has no tool-call markup
            return OutputMarkup(think_end=THINK_END, tool_open=None)
        raise ValueError(f"unknown output format {output_format!r}: expected deepseek_v4, deepseek_v41, "
                         "deepseek_r1 or chatml")


_REASONING, _CONTENT, _TOOLS, _DONE = range(4)
_NEVER = re.compile(r"(?!)")


@lru_cache(maxsize=64)
def _first_char_trigger(chars: str) -> re.Pattern[str]:
    """A pattern of any of `chars` (sorted): the first characters of the format's own markers, a handful
    of sets per process. Stop sequences' first characters are checked as a set instead, so a request with
    stop sequences never seen before compiles no pattern (a fresh `re.compile` costs ~0.1-1 ms)."""
    return re.compile("[" + re.escape(chars) + "]") if chars else _NEVER


# (marker first-character pattern, stop-sequence first characters not in it or None, holds trailing newlines)
_FastSpec = tuple[re.Pattern[str], frozenset[str] | None, bool]


class OutputTextParser:
    """Incremental parser of one choice's output text (see module docstring for the rules)."""

    # The no-marker-character fast path (tests switch it off to prove it changes nothing).
    fast_path: ClassVar[bool] = True

    def __init__(self, options: ParsingOptions, output_format: str = "deepseek_v4") -> None:
        self.options = options
        self.output_format = output_format
        markup = OutputMarkup.for_format(output_format)
        self._think_end = markup.think_end
        self._tool_open = markup.tool_open if options.parse_tool_calls else None
        self._stops = tuple(s for s in options.stop_sequences if s)
        stage = options.thinking_initial_stage
        self.thinking = stage is not None and markup.think_end is not None
        self._tools: ToolCallParser | None = None
        self.stop_sequence: str | None = None
        self.reasoning_text: list[str] = []
        self._pending: list[_Segment] = []
        self._json = JsonOutputFilter(self._stops) if options.parse_json_output else None
        self._strip_leading = False
        self.starts_in_reasoning = False
        self._token_markers = False
        self._fast: dict[int, _FastSpec] = {}
        self._marks_cache: dict[tuple[int, int, bool], list[str]] = {}
        self._tail = ""  # the last emitted characters (context for the newline rule before markers)
        if options.starts_in_tool_calls and self._tool_open is not None:
            self._mode = _TOOLS
            self._tools = self._new_tool_parser()
            self._tools.feed(self._tool_block_opener())
        elif self.thinking and stage is not None and stage.starts_in_reasoning():
            self.starts_in_reasoning = True
            self._mode = _REASONING
            self._strip_leading = stage is ThinkingInitialStage.REASONING_START
        else:
            self._mode = _CONTENT
            self._strip_leading = stage is not ThinkingInitialStage.CONTENT_CONTINUATION

    # ---- public --------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once a stop sequence matched or the tool-call block closed; later text is ignored."""
        return self._mode == _DONE

    @property
    def tool_call_count(self) -> int:
        return self._tools.call_count if self._tools is not None else 0

    def feed(self, text: str, logprobs: LogprobEntries = None) -> list[Piece]:
        """Parse one backend chunk; `logprobs` (Chat-shaped entries of its tokens) ride on its text."""
        return self.feed_segments([(text, logprobs)])

    def feed_text(self, text: str) -> list[Piece]:
        """`feed(text)` without logprobs (the per-token path)."""
        if self._json is not None:
            return self.feed_segments([(text, None)])
        out: list[Piece] = []
        self._feed(text, None, out)
        return out

    def feed_segments(self, segments: list[_Segment]) -> list[Piece]:
        """Parse one backend chunk made of several runs (a token update is split at special tokens)."""
        out: list[Piece] = []
        json = self._json
        for text, lp in segments:
            if json is not None and json.passing and self._tool_open is not None and self._mode == _CONTENT:
                # A closing fence inside this chunk re-enables tool-call parsing for the text after it
                cut = json.fence_end_in(text)
                if 0 < cut < len(text):
                    self._feed(text[:cut], lp, out)
                    self._feed(text[cut:], lp, out)  # every piece of a chunk carries its logprobs
                    continue
            self._feed(text, lp, out)
        return out

    def finish(self) -> list[Piece]:
        """End of output: release everything held back (partial markers become text)."""
        out: list[Piece] = []
        if self._mode in (_REASONING, _CONTENT):
            self._release(len(self._pending), out)
        elif self._mode == _TOOLS and self._tools is not None:
            out.extend(self._tools.finish())
        if self._json is not None:
            out.extend(ContentPiece(unmask(text) if self._token_markers else text, lp) for text, lp in self._json.finish())
        return out

    # ---- internals -----------------------------------------------------------------------------

    @property
    def token_markers(self) -> bool:
        """Whether markers are matched by their special tokens' sentinels (token-id input)."""
        return self._token_markers

    def use_token_markers(self) -> None:
        """Match markers by their special tokens (sentinels written by the processor), not by spelling."""
        if self._token_markers or self.output_format == "chatml":
            return
        self._token_markers = True
        self._fast.clear()
        self._think_end = THINK_END_SENTINEL
        if self._tool_open is not None:
            self._tool_open = "<" + DSML_SENTINEL
        if self._mode == _TOOLS and self._tools is not None and not self._tools.call_count:
            # started inside the block (required tool choice): restart the block parser on token markers
            self._tools = self._new_tool_parser()
            self._tools.feed(self._tool_block_opener())

    def _new_tool_parser(self) -> ToolCallParser:
        if self.output_format == "chatml":
            return ChatMLToolCallParser()
        return DsmlToolCallParser(DSML_SENTINEL if self._token_markers else DSML)

    def _tool_block_opener(self) -> str:
        if self.output_format == "chatml":
            return "<tool_call>"
        return (self._tool_open or DSML_OPEN) + ("tool_calls>\n" if self.output_format == "deepseek_v4" else " calls>\n")

    def _emit(self, seg: _Segment, out: list[Piece]) -> None:
        text, lp = seg
        if not text or self._mode == _DONE:
            return
        self._tail = (self._tail + text)[-32:]
        if self._json is not None and self._mode == _CONTENT:
            self._json_content(text, lp, out)
            return
        if self._token_markers:
            text = unmask(text)
        if self._mode == _REASONING:
            self.reasoning_text.append(text)
            out.append(ReasoningPiece(text, lp))
        else:
            out.append(ContentPiece(text, lp))

    def _json_content(self, text: str, lp: LogprobEntries, out: list[Piece]) -> None:
        """Content through the JSON filter; a stop sequence it matched ends the output."""
        assert self._json is not None
        pieces = self._json.filter_piece(text, lp)  # sentinels stay opaque to the filter's stop matching
        if self._token_markers:
            for piece in pieces:
                piece.text = unmask(piece.text)
        out.extend(pieces)
        if self._json.stopped is not None:
            self.stop_sequence = self._json.stopped
            self._mode = _DONE
            self._pending = []

    def _markers(self) -> list[str]:
        phase = self._json.phase if self._json is not None else -1
        key = (self._mode, phase, self._token_markers)
        cached = self._marks_cache.get(key)
        if cached is None:
            cached = self._marks_cache[key] = self._compute_markers()
        return cached

    def _compute_markers(self) -> list[str]:
        marks: list[str] = []
        # In JSON mode, markup inside the passing JSON answer (a stray `</think>`, tool calls) is answer
        # text; a stray `</think>` is removed only before the answer, tool calls open after it too.
        json = self._json if self._mode == _CONTENT else None
        if self._think_end is not None and (json is None or json.seeking):
            marks.append(self._think_end)
        if self._tool_open is not None and (json is None or not json.passing):
            marks.append(self._tool_open)
        if self._mode == _CONTENT and self._json is None:
            marks.extend(self._stops)  # in JSON mode the filter matches them, in the JSON text only
        return marks

    def _feed(self, text: str, lp: LogprobEntries, out: list[Piece]) -> None:
        mode = self._mode
        if mode == _DONE or not text:
            return
        if mode == _TOOLS:
            assert self._tools is not None
            out.extend(self._tools.feed(text))
            if self._tools.done:
                self._mode = _DONE
            return
        if self._strip_leading:
            stripped = text.lstrip("\n")
            if len(stripped) < len(text) and self._newline_stop():
                return
            if not stripped:
                return
            self._strip_leading = False
            text = stripped
        if not self._pending and self.fast_path:
            # fast path: nothing held and no character that could start a marker
            json = self._json
            key = self._mode if json is None else self._mode + 8 * (json.phase + 1)
            spec = self._fast.get(key)
            if spec is None:
                spec = self._fast[key] = self._fast_spec()
            trigger, stop_chars, holds_newlines = spec
            if (
                trigger.search(text) is None
                and (stop_chars is None or stop_chars.isdisjoint(text))
                and not (holds_newlines and text[-1] == "\n")
            ):
                self._tail = _extend_tail(self._tail, text)
                if json is not None and self._mode == _CONTENT:
                    self._json_content(text, lp, out)
                    return
                if self._token_markers:
                    text = unmask(text)
                if self._mode == _REASONING:
                    self.reasoning_text.append(text)
                    out.append(ReasoningPiece(text, lp))
                else:
                    out.append(ContentPiece(text, lp))
                return
        self._pending.append((text, lp))
        self._scan(out)

    def _fast_spec(self) -> _FastSpec:
        """For the current state: the characters that may start a marker (a pattern for the format's
        markers, a set for the stop sequences' other first characters), and whether trailing newlines
        are held."""
        marks = self._markers()
        n_stops = len(self._stops) if self._mode == _CONTENT and self._json is None else 0
        own = {m[0] for m in marks[: len(marks) - n_stops]}
        stop_chars = frozenset(m[0] for m in marks[len(marks) - n_stops :]) - own
        return _first_char_trigger("".join(sorted(own))), stop_chars or None, self._holds_newlines(marks)

    def _holds_newlines(self, marks: list[str]) -> bool:
        """Trailing newlines wait: they are dropped if `</think>` or a tool block follows."""
        return self._mode == _REASONING or (self._tool_open is not None and self._tool_open in marks)

    def _scan(self, out: list[Piece]) -> None:
        while True:
            joined = "".join(seg[0] for seg in self._pending)
            marks = self._markers()
            # The marker whose match ends first wins; at a tie a stop sequence beats `</think>` and the
            # tool-call opener, and the stop sequence listed first beats the others (the reference's
            # streaming matcher). Stops are listed last in `marks`.
            best = -1
            best_end = -1
            best_mark = ""
            first_stop = len(marks) - (len(self._stops) if self._mode == _CONTENT and self._json is None else 0)
            best_rank = 0
            for k, m in enumerate(marks):
                i = joined.find(m)
                if i < 0:
                    continue
                rank = k - first_stop if k >= first_stop else len(marks) + k
                if best < 0 or i + len(m) < best_end or (i + len(m) == best_end and rank < best_rank):
                    best, best_end, best_mark, best_rank = i, i + len(m), m, rank
            is_stop = best >= 0 and best_rank < len(marks)
            json = self._json
            if json is not None and self._mode == _CONTENT:
                # The JSON answer begins (or its closing fence ends it) before any marker: what follows
                # is scanned with the markers of the filter's next state.
                start = json.fence_end_in(joined) if json.passing else json.value_start_in(joined)
                if start >= 0 and (best < 0 or start <= best_end):
                    before, after = _cut_segments(self._pending, start)
                    self._pending = before
                    self._release(len(before), out)
                    if self._mode == _DONE:
                        return
                    self._pending = after
                    continue
            if best < 0:
                self._release_certain(joined, marks, out)
                return
            before, after = _split_segments(self._pending, best, best + len(best_mark))
            if not is_stop and best_mark == self._think_end and self._mode == _CONTENT:
                # a stray `</think>` in the answer is removed; no marker or stop match spans it
                self._pending = before
                self._release(len(before), out)
                if self._mode == _DONE:
                    return
                if json is not None and json.seeking:
                    out.extend(json.break_prose())
                self._tail = ""
                self._pending = after
                continue
            if not is_stop and best_mark == self._think_end:
                self._pending = _strip_trailing_newlines(before, best_mark, self._tail)
                self._release(len(self._pending), out)
                self._mode = _CONTENT
                self._tail = ""
                self._strip_leading = True
                self._pending = []
                for seg in after:
                    self._feed_segment(seg)
                if self._mode == _DONE:
                    return
                continue
            if not is_stop and best_mark == self._tool_open:
                self._pending = _strip_trailing_newlines(before, best_mark, self._tail)
                self._release(len(self._pending), out)
                if self._mode == _DONE:
                    return
                if json is not None and json.seeking:
                    out.extend(json.break_prose())  # no fence opener continues into the block
                self._mode = _TOOLS
                self._tools = self._new_tool_parser()
                if isinstance(self._tools, DsmlToolCallParser):
                    # each backend chunk stays one feed: argument deltas are grouped by chunk
                    texts = [seg[0] for seg in after] or [""]
                    texts[0] = best_mark + texts[0]
                    for text in texts:
                        out.extend(self._tools.feed(text))
                else:
                    out.extend(self._tools.feed(best_mark + "".join(seg[0] for seg in after)))
                if self._tools.done:
                    self._mode = _DONE
                return
            # a stop sequence
            self._pending = before
            self._release(len(before), out)
            self.stop_sequence = best_mark
            self._mode = _DONE
            return

    def _newline_stop(self) -> bool:
        """A stop sequence `"\n"` ends the output at a dropped leading newline of the answer (the
        reference checks each dropped newline on its own, so only that exact sequence matches)."""
        if self._mode != _CONTENT or self._json is not None or "\n" not in self._stops:
            return False
        self.stop_sequence = "\n"
        self._mode = _DONE
        self._pending = []
        return True

    def _feed_segment(self, seg: _Segment) -> None:
        if self._mode == _DONE:
            return
        if self._strip_leading:
            text = seg[0].lstrip("\n")
            if len(text) < len(seg[0]) and self._newline_stop():
                return
            if not text:
                return
            self._strip_leading = False
            seg = (text, seg[1])
        self._pending.append(seg)

    def _release_certain(self, joined: str, marks: list[str], out: list[Piece]) -> None:
        if self.fast_path:
            hold = len(joined) - partial_length(joined, marks)  # a held end is found by `str.find`
        else:
            hold = len(joined)
            for m in marks:
                for k in range(min(len(m) - 1, len(joined)), 0, -1):
                    if joined.endswith(m[:k]):
                        hold = min(hold, len(joined) - k)
                        break
        if self._holds_newlines(marks):
            while hold > 0 and joined[hold - 1] == "\n":
                hold -= 1
        pos = 0
        n = 0
        for seg in self._pending:
            if pos + len(seg[0]) > hold:
                break
            pos += len(seg[0])
            n += 1
        self._release(n, out)

    def _release(self, n: int, out: list[Piece]) -> None:
        for seg in self._pending[:n]:
            self._emit(seg, out)
        del self._pending[:n]


def _extend_tail(tail: str, text: str) -> str:
    """`tail + text`, cut back to its last 32 characters once it passes 64 (one cut per ~32 characters
    instead of one per token; the newline rule only looks back less than a marker's length)."""
    tail += text
    return tail[-32:] if len(tail) > 64 else tail


def _split_segments(segments: list[_Segment], start: int, end: int) -> tuple[list[_Segment], list[_Segment]]:
    """Segments of the text before `start` and after `end`, cut at those offsets.

    A cut segment's logprobs stay with its first surviving part.
    """
    before: list[_Segment] = []
    after: list[_Segment] = []
    pos = 0
    for text, lp in segments:
        s0, s1 = pos, pos + len(text)
        head = text[: start - s0] if s0 < start else ""
        tail = text[max(0, end - s0) :] if s1 > end else ""
        if head:
            before.append((head, lp))
            lp = None
        if tail:
            after.append((tail, lp))
        pos = s1
    return before, after


def _cut_segments(segments: list[_Segment], at: int) -> tuple[list[_Segment], list[_Segment]]:
    """Segments of the text before and after offset `at`; both parts of a cut segment keep its logprobs."""
    before: list[_Segment] = []
    after: list[_Segment] = []
    pos = 0
    for text, lp in segments:
        if pos + len(text) <= at:
            before.append((text, lp))
        elif pos >= at:
            after.append((text, lp))
        else:
            before.append((text[: at - pos], lp))
            after.append((text[at - pos :], lp))
        pos += len(text)
    return before, after


def _strip_trailing_newlines(segments: list[_Segment], mark: str, emitted_tail: str) -> list[_Segment]:
    """Drop the newlines right before `mark`.

    Like the reference's streaming matcher, a newline that broke a partial match of `mark` (`</thi`
    then `\n`) was consumed with that failed match and stays.
    """
    joined = "".join(seg[0] for seg in segments)
    run_start = len(joined.rstrip("\n"))
    keep = run_start
    if run_start < len(joined):
        head = emitted_tail + joined[:run_start]
        lt = head.rfind("<")
        if lt >= 0 and len(head) - lt < len(mark) and mark.startswith(head[lt:]):
            keep = run_start + 1
    segs: list[_Segment] = []
    pos = 0
    for text, lp in segments:
        if pos >= keep:
            break
        part = text[: keep - pos]
        if part:
            segs.append((part, lp))
        pos += len(text)
    return segs
