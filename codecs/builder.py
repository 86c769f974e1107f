"""Accumulates prompt text piece by piece, remembering which pieces are special tokens or template text."""

from __future__ import annotations

from recipe.codecs.rendered import RenderedPrompt

from recipe.conversation import ImageSource


class PromptBuilder:
    """Append-only prompt assembly; `build()` returns the `RenderedPrompt`.

    `special(s)` appends one special-token spelling (one range); `text(s)` appends plain text;
    `fixed(s)` appends plain template text that never depends on the request (a cache hint for encoding).
    """

    __slots__ = ("_fixed", "_images", "_parts", "_pos", "_ranges")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._ranges: list[tuple[int, int]] = []
        self._fixed: list[tuple[int, int]] = []
        self._images: list[ImageSource] = []
        self._pos = 0

    def special(self, spelling: str) -> None:
        end = self._pos + len(spelling)
        self._ranges.append((self._pos, end))
        self._parts.append(spelling)
        self._pos = end

    def text(self, text: str) -> None:
        if text:
            self._parts.append(text)
            self._pos += len(text)

    def fixed(self, text: str) -> None:
        if not text:
            return
        end = self._pos + len(text)
        fixed = self._fixed
        if fixed and fixed[-1][1] == self._pos:
            fixed[-1] = (fixed[-1][0], end)
        else:
            fixed.append((self._pos, end))
        self._parts.append(text)
        self._pos = end

    def images(self, sources: tuple[ImageSource, ...]) -> None:
        self._images.extend(sources)

    @property
    def position(self) -> int:
        return self._pos

    def build(self) -> RenderedPrompt:
        return RenderedPrompt(
            "".join(self._parts), tuple(self._ranges), tuple(self._images), tuple(self._fixed)
        )
