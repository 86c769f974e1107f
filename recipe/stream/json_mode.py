"""JSON output mode (`response_format: json_object`): keep the first JSON value, blank the prose around it.

Content is scanned for the first `{` or `[`. Text before it is suppressed; after a fenced value
(```` ```json … ``` ````) the closing fence and everything after it are suppressed; after a bare value the
rest passes through, unless a closing fence follows directly. Per backend chunk, each suppressed run that
holds something other than leading whitespace or fence markers is replaced by one space, so a client
sees where prose was dropped without receiving it.
"""

from __future__ import annotations

from recipe.stream.pieces import ContentPiece, Piece

_BEFORE, _VALUE, _AFTER_BARE, _SUPPRESS = range(4)


class JsonOutputFilter:
    """Applied to the content pieces of each chunk, in order."""

    def __init__(self) -> None:
        self._state = _BEFORE
        self._prefix = ""  # text seen before the value starts (to recognise an opening fence)
        self._fenced = False
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._tail = ""  # text after a bare value (to recognise a closing fence)
        self._emitted = False
        self._chunk_suppressed = False

    def begin_chunk(self) -> None:
        self._chunk_suppressed = False

    def end_chunk(self, pieces: list[Piece]) -> list[Piece]:
        out: list[Piece] = []
        for piece in pieces:
            if not isinstance(piece, ContentPiece):
                out.append(piece)
                continue
            kept = self._filter(piece.text)
            if kept:
                out.append(ContentPiece(kept, piece.logprobs))
        return out

    def _suppress(self, text: str, fence: bool = False) -> str:
        """Record suppressed text; returns the space that stands for it (at most one per run)."""
        if fence:
            return ""
        if not self._emitted and not text.strip():
            return ""
        if text:
            self._emitted = True
            return " "
        return ""

    def _filter(self, text: str) -> str:
        out: list[str] = []
        i = 0
        n = len(text)
        run: list[str] = []
        while i < n:
            state = self._state
            ch = text[i]
            if state == _BEFORE:
                if ch in "{[":
                    prefix = self._prefix + "".join(run)
                    fenced = prefix.rstrip().endswith(("```json", "```"))
                    self._fenced = fenced
                    body = prefix
                    if fenced:
                        body = prefix.rstrip()
                        body = body[: body.rfind("```")]
                    out.append(self._suppress(body))
                    run = []
                    self._state = _VALUE
                    self._depth = 0
                    continue
                run.append(ch)
                i += 1
                continue
            if state == _VALUE:
                out.append(ch)
                self._emitted = True
                i += 1
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
                        self._state = _SUPPRESS if self._fenced else _AFTER_BARE
                        self._tail = ""
                continue
            if state == _AFTER_BARE:
                self._tail += ch
                stripped = self._tail.lstrip("\n")
                if stripped.startswith("```"):
                    self._state = _SUPPRESS
                    i += 1
                    continue
                if "```".startswith(stripped):
                    i += 1
                    continue
                out.append(self._tail)
                self._tail = ""
                self._state = _AFTER_BARE_PASS
                i += 1
                continue
            if state == _AFTER_BARE_PASS:
                out.append(text[i:])
                break
            # _SUPPRESS
            run.append(ch)
            i += 1
        if run:
            if self._state == _BEFORE:
                self._prefix += "".join(run)
                if "".join(run).strip():
                    pass
                out.append(self._suppress_before("".join(run)))
            else:
                out.append(self._suppress_after("".join(run)))
        return "".join(out)

    def _suppress_before(self, text: str) -> str:
        stripped = text.strip()
        if not stripped or stripped in ("```", "```json"):
            return ""
        self._emitted = True
        return " "

    def _suppress_after(self, text: str) -> str:
        stripped = text.strip()
        if not stripped or stripped == "```":
            return ""
        self._emitted = True
        return " "


_AFTER_BARE_PASS = 4
