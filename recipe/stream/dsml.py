"""DSML tool-call markup parser (DeepSeek V4 `<｜DSML｜tool_calls>` and V4.1 `<｜DSML｜ calls>` forms).

Fed the output text from the first `<｜DSML｜` on, it emits each `invoke` as a `ToolCallStart` and its
parameters as JSON object text, incrementally: `{` at the first parameter, the key exactly as written
after `parameter name=` (quotes included) up to the first space, `: `, the value (string parameters
JSON-escaped on the fly, other parameters copied verbatim), `}` at the invoke's end; an invoke without
parameters gives `{}`. A parameter tag must end in `true">` or `false">`; otherwise parsing stops there
and the call stays unterminated, as the reference's does. Text between tags and unknown tags are
swallowed; everything after the closing `tool_calls`/`calls` tag is discarded. Both spellings are
accepted for either model. Emission points and the grouping of pieces within one feed match the
official reference, so streamed deltas are identical to it.
"""

from __future__ import annotations

import orjson

from recipe.stream.call_ids import new_call_id
from recipe.stream.pieces import Piece, ToolCallArguments, ToolCallStart
from recipe.stream.token_markers import unmask

DSML = "｜DSML｜"
OPEN = "<" + DSML
CLOSE = "</" + DSML
_BLOCK_NAMES = frozenset({"tool_calls", "calls"})

# parser states
_OUTSIDE, _TAG, _SKIP, _KEY, _AFTER_KEY, _VALUE, _DONE = range(7)


def _escape_json_fragment(text: str) -> str:
    """`text` JSON-escaped as the inside of a string literal (no quotes)."""
    return orjson.dumps(text).decode()[1:-1]


class DsmlToolCallParser:
    """Incremental DSML parser; `feed(text)` returns the pieces completed by that text."""

    def __init__(self, dsml: str = DSML) -> None:
        self._open = "<" + dsml
        self._close = "</" + dsml
        self._buf = ""
        self._state = _OUTSIDE
        self._calls = 0
        self._in_invoke = False
        self._params = 0
        self._string_value = False
        self._closing = False
        self._json_in_string = False
        self._value_cuts: list[int] = []  # chunk boundaries inside held value text
        self._out: list[Piece] = []
        self._kind: list[str] = []  # parallel to _out: "s" structural, "k" key text, "v" value text

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def call_count(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Piece]:
        if self._state == _DONE:
            return []
        if self._state == _VALUE and self._buf:
            self._value_cuts.append(len(self._buf))
        self._buf += text
        self._out = []
        self._kind = []
        while self._step():
            pass
        return self._out

    # ---- emission -------------------------------------------------------------------------

    def _arg(self, text: str, kind: str) -> None:
        """Append argument text; key text merges with key text."""
        text = unmask(text)
        index = self._calls - 1
        if kind != "s" and self._kind and self._kind[-1] == kind:
            prev = self._out[-1]
            assert isinstance(prev, ToolCallArguments)
            self._out[-1] = ToolCallArguments(index, prev.text + text)
            return
        self._out.append(ToolCallArguments(index, text))
        self._kind.append(kind)

    def _value_text(self, end: int) -> None:
        """Emit `_buf[:end]` as value text: one piece per chunk it arrived in (never merged)."""
        start = 0
        for cut in [*self._value_cuts, end]:
            cut = min(cut, end)
            if cut > start:
                text = unmask(self._buf[start:cut])
                self._out.append(ToolCallArguments(self._calls - 1, _escape_json_fragment(text) if self._string_value else text))
                self._kind.append("s")
                start = cut
        self._value_cuts = []

    def _start_call(self, name: str) -> None:
        self._out.append(ToolCallStart(self._calls, new_call_id(self._calls), name))
        self._kind.append("s")
        self._calls += 1
        self._in_invoke = True
        self._params = 0

    def _end_call(self) -> None:
        if self._in_invoke:
            self._arg("}" if self._params else "{}", "s")
            self._in_invoke = False

    # ---- states -----------------------------------------------------------------------------

    def _step(self) -> bool:
        """Advance one unit; False when more input is needed (or the block is done)."""
        state = self._state
        if state == _OUTSIDE:
            return self._outside()
        if state == _TAG:
            return self._tag()
        if state == _SKIP:
            gt = self._buf.find(">")
            if gt < 0:
                self._buf = ""
                return False
            self._buf = self._buf[gt + 1 :]
            self._state = _OUTSIDE
            return True
        if state == _KEY:
            return self._key()
        if state == _AFTER_KEY:
            return self._after_key()
        if state == _VALUE:
            return self._value()
        return False

    def _outside(self) -> bool:
        buf = self._buf
        lt = buf.find("<")
        while lt >= 0:
            rest = buf[lt:]
            if rest.startswith(self._open) or rest.startswith(self._close):
                break
            if self._open.startswith(rest) or self._close.startswith(rest):
                self._buf = rest
                return False
            lt = buf.find("<", lt + 1)
        if lt < 0:
            self._buf = ""
            return False
        rest = buf[lt:]
        if rest.startswith(self._close):
            self._end_call()
            self._buf = rest[len(self._close) :]
            self._state = _TAG
            self._closing = True
        else:
            self._buf = rest[len(self._open) :]
            self._state = _TAG
            self._closing = False
        return True

    def _tag(self) -> bool:
        """After `<｜DSML｜` or `</｜DSML｜`: the tag name and, for invoke/parameter, the name attribute."""
        buf = self._buf
        body = buf[1:] if buf.startswith(" ") else buf
        end = 0
        while end < len(body) and (body[end].isalnum() or body[end] == "_"):
            end += 1
        if end == len(body):
            return False
        tag = body[:end]
        after = body[end:]
        if self._closing:
            if tag in _BLOCK_NAMES:
                self._end_call()
                self._state = _DONE
                self._buf = ""
                return False
            self._state = _SKIP
            self._buf = after
            return True
        if tag == "invoke":
            head = ' name="'
            if len(after) < len(head):
                return False
            if not after.startswith(head):
                self._state = _SKIP
                self._buf = after
                return True
            quote = after.find('"', len(head))
            if quote < 0:
                return False
            self._end_call()
            self._start_call(unmask(after[len(head) : quote]))
            self._buf = after[quote + 1 :]
            self._state = _SKIP
            return True
        if tag == "parameter" and self._in_invoke:
            # `parameter name=` is followed by the key as written (its quotes included) up to a space
            head = " name="
            if len(after) < len(head):
                return False
            if not after.startswith(head):
                self._state = _SKIP
                self._buf = after
                return True
            self._arg(", " if self._params else "{", "s")
            self._params += 1
            self._buf = after[len(head) :]
            self._state = _KEY
            return True
        self._state = _SKIP
        self._buf = after
        return True

    def _key(self) -> bool:
        buf = self._buf
        space = buf.find(" ")
        if space < 0:
            if buf:
                self._arg(buf, "k")
            self._buf = ""
            return False
        if space:
            self._arg(buf[:space], "k")
        self._arg(": ", "s")
        self._buf = buf[space + 1 :]
        self._state = _AFTER_KEY
        return True

    def _after_key(self) -> bool:
        """The rest of the parameter tag: it must end with `true">` or `false">`, else the block is broken."""
        buf = self._buf
        gt = buf.find(">")
        if gt < 0:
            return False
        attrs = buf[:gt]
        if attrs.endswith('true"'):
            self._open_value(True, gt + 1)
        elif attrs.endswith('false"'):
            self._open_value(False, gt + 1)
        else:
            self._broken()
            return False
        return True

    def _broken(self) -> None:
        """Malformed markup: the reference stops parsing the block there (the call stays unterminated)."""
        self._state = _DONE
        self._buf = ""
        self._in_invoke = False

    def _open_value(self, is_string: bool, consumed: int) -> None:
        if is_string:
            self._arg('"', "s")
        self._string_value = is_string
        self._buf = self._buf[consumed:]
        self._state = _VALUE

    def _value(self) -> bool:
        buf = self._buf
        # In a non-string value, `<` inside a JSON string literal never holds the value back.
        in_str = self._json_in_string
        lt = -1
        i = 0
        n = len(buf)
        while i < n:
            ch = buf[i]
            if not self._string_value:
                if in_str:
                    if ch == "\\":
                        i += 2
                        continue
                    if ch == '"':
                        in_str = False
                elif ch == '"':
                    in_str = True
            if ch == "<":
                rest = buf[i:]
                if rest.startswith(self._close):
                    lt = i
                    break
                if self._close.startswith(rest) and not in_str:
                    return False
            i += 1
        if lt < 0:
            self._value_text(len(buf))
            self._json_in_string = in_str
            self._buf = ""
            return False
        self._value_text(lt)
        if self._string_value:
            self._arg('"', "s")
        self._json_in_string = False
        self._buf = buf[lt + len(self._close) :]
        self._state = _TAG
        self._closing = True
        return True

    def finish(self) -> list[Piece]:
        """End of output: pieces still owed (a cut block leaves its arguments unterminated)."""
        return []
