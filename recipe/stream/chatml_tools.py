"""ChatML tool calls (the demo model SmolLM2): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.

Each complete block becomes a `ToolCallStart` and one `ToolCallArguments` piece holding the arguments
as compact JSON text (`{}` when absent). Whitespace between blocks is skipped; any other text after the
first block ends the region and is discarded. A block whose body is not a JSON object with a string
`name` is dropped. A block cut by the end of output is dropped too (there is no name to report).
"""

from __future__ import annotations

import orjson

from recipe.stream.call_ids import new_call_id
from recipe.stream.pieces import Piece, ToolCallArguments, ToolCallStart

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class ChatMLToolCallParser:
    """Incremental parser of `<tool_call>` blocks; `feed` returns calls completed by the text."""

    def __init__(self) -> None:
        self._buf = ""
        self._calls = 0
        self.done = False

    @property
    def call_count(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Piece]:
        if self.done:
            return []
        self._buf += text
        out: list[Piece] = []
        while True:
            buf = self._buf.lstrip()
            if not buf:
                self._buf = ""
                return out
            if not buf.startswith(OPEN):
                if OPEN.startswith(buf):
                    self._buf = buf
                    return out
                self.done = True
                self._buf = ""
                return out
            end = buf.find(CLOSE)
            if end < 0:
                self._buf = buf
                return out
            body = buf[len(OPEN) : end]
            self._buf = buf[end + len(CLOSE) :]
            out.extend(self._call(body))

    def _call(self, body: str) -> list[Piece]:
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return []
        args = value.get("arguments", {})
        text = args if isinstance(args, str) else orjson.dumps(args if args is not None else {}).decode()
        index = self._calls
        self._calls += 1
        return [ToolCallStart(index, new_call_id(index), value["name"]), ToolCallArguments(index, text)]

    def finish(self) -> list[Piece]:
        return []
