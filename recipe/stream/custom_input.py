"""The raw `input` of a custom tool call, read from the JSON argument text the tool-call parsers stream.

The parsers spell a call's arguments `{"input": "…", …}` when its first parameter is `input` with a
string value. Then the decoded string is released as it forms (an escape is held until it is whole) and
is the input. Any other argument text is released as it comes and is itself the input, as the reference
reports it. `value()` reads the finished arguments the same way: the `input` member when it is a string,
otherwise the whole text (so the released pieces always add up to `value()`, even for a cut-off call).
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = '{"input": "'
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class CustomInput:
    def __init__(self) -> None:
        self._buf: list[str] = []
        self._text = ""  # the argument text so far, while it may still be the string form
        self._mode = "prefix"  # prefix → string → done, or whole
        self._pos = 0
        self._decoded: list[str] = []

    def feed(self, text: str) -> str:
        """The input text that `text` (more argument text) completes."""
        self._buf.append(text)
        if self._mode == "whole":
            return text
        if self._mode == "done":
            return ""
        self._text += text
        if self._mode == "prefix":
            if not self._text.startswith(PREFIX):
                if PREFIX.startswith(self._text):
                    return ""
                self._mode = "whole"
                return self._text
            self._mode = "string"
            self._pos = len(PREFIX)
        return self._decode()

    def finish(self) -> str:
        """What is left to release once the arguments are complete."""
        if self._mode == "prefix":  # a prefix of the string form, never completed
            self._mode = "whole"
            return self._text
        return ""

    def value(self) -> str:
        text = "".join(self._buf)
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
            return str(parsed["input"])
        if self._mode in ("string", "done"):
            return "".join(self._decoded)
        return text

    def _decode(self) -> str:
        s = self._text
        i = self._pos
        out: list[str] = []
        while i < len(s):
            c = s[i]
            if c == '"':
                self._mode = "done"
                i += 1
                break
            if c != "\\":
                j = i + 1
                while j < len(s) and s[j] not in '"\\':
                    j += 1
                out.append(s[i:j])
                i = j
                continue
            if i + 1 >= len(s):
                break
            e = s[i + 1]
            if e != "u":
                out.append(_ESCAPES.get(e, e))
                i += 2
                continue
            if i + 6 > len(s):
                break
            code = int(s[i + 2 : i + 6], 16)
            if 0xD800 <= code < 0xDC00:  # a surrogate pair is released whole
                if i + 12 > len(s):
                    break
                if s[i + 6 : i + 8] == "\\u":
                    low = int(s[i + 8 : i + 12], 16)
                    if 0xDC00 <= low < 0xE000:
                        out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                        i += 12
                        continue
            out.append(chr(code))
            i += 6
        self._pos = i
        piece = "".join(out)
        self._decoded.append(piece)
        return piece
