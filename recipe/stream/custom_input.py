"""The raw `input` of a custom tool call, read from the JSON argument text the tool-call parsers stream.

The parsers spell a call's arguments `{"input": "…", …}` when its first parameter is `input` with a
string value. Then the decoded string is released as it forms (an escape is held until it is whole; one
cut off by the end of the output is released as written) and is the input. Any other argument text is released as it comes and is itself the input, as the reference
reports it (an `input` that is not the first member, or not a string, leaves the whole text). The released
pieces always add up to `value()`, even for a cut-off call.
"""

from __future__ import annotations

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
        if self._mode == "string" and self._pos < len(self._text):  # a cut-off escape, as written
            tail = self._text[self._pos :]
            self._pos = len(self._text)
            self._decoded.append(tail)
            return tail
        return ""

    def value(self) -> str:
        if self._mode in ("string", "done"):
            return "".join(self._decoded)
        return "".join(self._buf)

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
            code = _hex(s[i + 2 : i + 6])
            if code is not None and 0xD800 <= code < 0xDC00:  # a surrogate pair is released whole
                rest = s[i + 6 : i + 12]
                if len(rest) < 6 and "\\u".startswith(rest[:2]):  # its low half may still come
                    break
                low = _hex(rest[2:]) if rest.startswith("\\u") else None
                if low is not None and 0xDC00 <= low < 0xE000:
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    i += 12
                    continue
            # a lone surrogate (no UTF-8 spelling) or a malformed escape stays as written
            out.append(s[i : i + 6] if code is None or 0xD800 <= code < 0xE000 else chr(code))
            i += 6
        self._pos = i
        piece = "".join(out)
        self._decoded.append(piece)
        return piece


def _hex(digits: str) -> int | None:
    if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        return None
    return int(digits, 16)
