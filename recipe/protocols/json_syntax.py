"""JSON body decoding with the reference's syntax-error messages.

`load_json(body)` decodes with orjson (the fast path). Only when orjson rejects the text does
`syntax_error_message` scan it again to report the first error the way serde_json words and places
it: `<reason> at line L column C`, C counting bytes of the line up to and including the offending
byte (for end of input: the bytes of the last line).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from recipe.errors import RequestError, parse_error

_WS = b" \t\n\r"
_HEX = b"0123456789abcdefABCDEF"
_DIGITS = b"0123456789"


class _SyntaxError(Exception):
    def __init__(self, reason: str, pos: int):
        self.reason = reason
        self.pos = pos


class _Scanner:
    """A recursive-descent JSON validator that raises at serde_json's error positions."""

    def __init__(self, data: bytes):
        self.d = data
        self.i = 0
        self.n = len(data)

    def fail(self, reason: str, consumed: bool = True) -> _SyntaxError:
        # `consumed`: the offending byte counts towards the column (it was read).
        return _SyntaxError(reason, self.i + 1 if consumed and self.i < self.n else self.i)

    def ws(self) -> None:
        while self.i < self.n and self.d[self.i] in _WS:
            self.i += 1

    def value(self, depth: int = 0) -> None:
        self.ws()
        if self.i >= self.n:
            raise self.fail("EOF while parsing a value", consumed=False)
        c = self.d[self.i]
        if depth > 127 and c in b"[{":
            raise self.fail("recursion limit exceeded")
        if c == ord("n"):
            self.ident(b"null")
        elif c == ord("t"):
            self.ident(b"true")
        elif c == ord("f"):
            self.ident(b"false")
        elif c == ord('"'):
            self.i += 1
            self.string()
        elif c == ord("-") or c in _DIGITS:
            self.number()
        elif c == ord("["):
            self.i += 1
            self.array(depth)
        elif c == ord("{"):
            self.i += 1
            self.obj(depth)
        else:
            raise self.fail("expected value")

    def ident(self, word: bytes) -> None:
        self.i += 1
        for b in word[1:]:
            if self.i >= self.n:
                raise self.fail("EOF while parsing a value", consumed=False)
            if self.d[self.i] != b:
                raise self.fail("expected ident")
            self.i += 1

    def string(self) -> None:
        start = self.i
        while True:
            if self.i >= self.n:
                raise self.fail("EOF while parsing a string", consumed=False)
            c = self.d[self.i]
            if c == ord('"'):
                try:
                    self.d[start : self.i].decode("utf-8")
                except UnicodeDecodeError:
                    raise self.fail("invalid unicode code point") from None
                self.i += 1
                return
            if c < 0x20:
                raise self.fail("control character (\\u0000-\\u001F) found while parsing a string")
            if c == ord("\\"):
                self.i += 1
                if self.i >= self.n:
                    raise self.fail("EOF while parsing a string", consumed=False)
                e = self.d[self.i]
                if e == ord("u"):
                    unit = self.hex4()
                    if 0xDC00 <= unit <= 0xDFFF:
                        raise self.fail("lone leading surrogate in hex escape")
                    if 0xD800 <= unit <= 0xDBFF:
                        # a leading surrogate must be followed by an escaped trailing one
                        if self.i + 1 >= self.n:
                            raise self.fail("EOF while parsing a string", consumed=False)
                        self.i += 1
                        if self.d[self.i] != ord("\\"):
                            raise self.fail("unexpected end of hex escape")
                        self.i += 1
                        if self.i >= self.n:
                            raise self.fail("EOF while parsing a string", consumed=False)
                        if self.d[self.i] != ord("u"):
                            raise self.fail("unexpected end of hex escape")
                        if not 0xDC00 <= self.hex4() <= 0xDFFF:
                            raise self.fail("lone leading surrogate in hex escape")
                elif e not in b'"\\/bfnrt':
                    raise self.fail("invalid escape")
            self.i += 1

    def hex4(self) -> int:
        """The four bytes after `u` (serde reads all four, then checks them); ends on the fourth."""
        if self.i + 4 >= self.n:
            self.i = self.n
            raise self.fail("EOF while parsing a string", consumed=False)
        digits = self.d[self.i + 1 : self.i + 5]
        self.i += 4
        if any(c not in _HEX for c in digits):
            raise self.fail("invalid escape")
        return int(digits, 16)

    def number(self) -> None:
        start = self.i
        self._number()
        if float(self.d[start : self.i]) in (float("inf"), float("-inf")):
            self.i -= 1
            raise self.fail("number out of range")

    def _number(self) -> None:
        if self.d[self.i] == ord("-"):
            self.i += 1
            if self.i >= self.n:
                raise self.fail("EOF while parsing a value", consumed=False)
        if self.d[self.i] not in _DIGITS:
            raise self.fail("invalid number")
        if self.d[self.i] == ord("0"):
            self.i += 1
            if self.i < self.n and self.d[self.i] in _DIGITS:
                raise self.fail("invalid number")
        else:
            while self.i < self.n and self.d[self.i] in _DIGITS:
                self.i += 1
        if self.i < self.n and self.d[self.i] == ord("."):
            self.i += 1
            if self.i >= self.n:
                raise self.fail("EOF while parsing a value", consumed=False)
            if self.d[self.i] not in _DIGITS:
                raise self.fail("invalid number")
            while self.i < self.n and self.d[self.i] in _DIGITS:
                self.i += 1
        if self.i < self.n and self.d[self.i] in b"eE":
            self.i += 1
            if self.i < self.n and self.d[self.i] in b"+-":
                self.i += 1
            if self.i >= self.n:
                raise self.fail("EOF while parsing a value", consumed=False)
            if self.d[self.i] not in _DIGITS:
                raise self.fail("invalid number")
            while self.i < self.n and self.d[self.i] in _DIGITS:
                self.i += 1

    def array(self, depth: int) -> None:
        self.ws()
        if self.i >= self.n:
            raise self.fail("EOF while parsing a list", consumed=False)
        if self.d[self.i] == ord("]"):
            self.i += 1
            return
        while True:
            self.value(depth + 1)
            self.ws()
            if self.i >= self.n:
                raise self.fail("EOF while parsing a list", consumed=False)
            c = self.d[self.i]
            if c == ord("]"):
                self.i += 1
                return
            if c != ord(","):
                raise self.fail("expected `,` or `]`")
            self.i += 1
            self.ws()
            if self.i < self.n and self.d[self.i] == ord("]"):
                raise self.fail("trailing comma")

    def obj(self, depth: int) -> None:
        self.ws()
        if self.i >= self.n:
            raise self.fail("EOF while parsing an object", consumed=False)
        if self.d[self.i] == ord("}"):
            self.i += 1
            return
        while True:
            if self.i >= self.n:
                raise self.fail("EOF while parsing an object", consumed=False)
            if self.d[self.i] != ord('"'):
                raise self.fail("key must be a string")
            self.i += 1
            self.string()
            self.ws()
            if self.i >= self.n:
                raise self.fail("EOF while parsing an object", consumed=False)
            if self.d[self.i] != ord(":"):
                raise self.fail("expected `:`")
            self.i += 1
            self.value(depth + 1)
            self.ws()
            if self.i >= self.n:
                raise self.fail("EOF while parsing an object", consumed=False)
            c = self.d[self.i]
            if c == ord("}"):
                self.i += 1
                return
            if c != ord(","):
                raise self.fail("expected `,` or `}`")
            self.i += 1
            self.ws()
            if self.i >= self.n:
                raise self.fail("EOF while parsing a value", consumed=False)
            if self.d[self.i] == ord("}"):
                raise self.fail("trailing comma")

    def document(self) -> None:
        self.value()
        self.ws()
        if self.i < self.n:
            raise self.fail("trailing characters")


def syntax_error_message(data: bytes) -> str | None:
    """serde_json's message for the first syntax error in `data`, or None if `data` is valid JSON."""
    sc = _Scanner(data)
    try:
        sc.document()
    except _SyntaxError as exc:
        before = data[: exc.pos]
        line = before.count(b"\n") + 1
        column = exc.pos - (before.rfind(b"\n") + 1)
        return f"{exc.reason} at line {line} column {column}"
    return None


def load_json(body: bytes | str) -> Any:
    """Decode a request body; raises a parse `RequestError` worded like the reference's."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    msg = syntax_error_message(data)
    if msg is not None:
        raise parse_error(f"invalid JSON request: {msg}")
    # Valid JSON orjson refuses (integers beyond 64 bits): the standard library reads them.
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # pragma: no cover - defensive
        raise parse_error(f"invalid JSON request: {exc}") from None


__all__ = ["RequestError", "load_json", "syntax_error_message"]
