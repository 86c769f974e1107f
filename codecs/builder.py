"""Accumulates prompt text piece by piece, remembering which pieces are special tokens or template text."""

from __future__ import annotations

from recipe.codecs.rendered import RenderedPrompt

from recipe.conversation import ImageSource


class PromptBuilder:
    """Append-only prompt assembly; `build()` returns the `RenderedPrompt`.

    `special(s)` appends one special-token spelling (one range); `text(s)` appends plain text;
    `template(s)` and `repeated(s)` append plain text that repeats across requests — template text, and
    tool lists or schemas that clients resend (cache hints for encoding: `RenderedPrompt.reusable_spans`).
    """

    __slots__ = ("_images", "_parts", "_pos", "_ranges", "_reusable", "_template_end")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._ranges: list[tuple[int, int]] = []
        self._reusable: list[tuple[int, int]] = []
        self._images: list[ImageSource] = []
        self._pos = 0
        self._template_end = -1

    def special(self, spelling: str) -> None:
        end = self._pos + len(spelling)
        self._ranges.append((self._pos, end))
        self._parts.append(spelling)
        self._pos = end

    def text(self, text: str) -> None:
        if text:
            self._parts.append(text)
            self._pos += len(text)

    def template(self, text: str) -> None:
        """Plain template text (never depends on the request); joins an adjacent template span."""
        if not text:
            return
        end = self._pos + len(text)
        spans = self._reusable
        if self._template_end == self._pos and spans:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((self._pos, end))
        self._template_end = end
        self._parts.append(text)
        self._pos = end

    def repeated(self, text: str) -> None:
        """Plain text that clients resend unchanged (a tool list, a schema): a span of its own."""
        if not text:
            return
        end = self._pos + len(text)
        self._reusable.append((self._pos, end))
        self._parts.append(text)
        self._pos = end

    def pieces(self, pieces: tuple[tuple[bool, str], ...]) -> None:
        """`special(text)` or `template(text)` for each `(is_special, text)`, in order (one call, same result)."""
        pos, parts, ranges, spans, template_end = self._pos, self._parts, self._ranges, self._reusable, self._template_end
        for is_special, text in pieces:
            end = pos + len(text)
            if is_special:
                ranges.append((pos, end))
            elif not text:
                continue
            elif template_end == pos and spans:
                spans[-1] = (spans[-1][0], end)
                template_end = end
            else:
                spans.append((pos, end))
                template_end = end
            parts.append(text)
            pos = end
        self._pos, self._template_end = pos, template_end

    def joined(self, parts: list[str], special: str) -> None:
        """`text(parts[0])`, `special(special)`, `text(parts[1])`, … : plain parts joined by one special
        spelling (a spelling inside a part stays plain text). One call, same result."""
        pos, out, ranges, width = self._pos, self._parts, self._ranges, len(special)
        for i, part in enumerate(parts):
            if i:
                ranges.append((pos, pos + width))
                out.append(special)
                pos += width
            if part:
                out.append(part)
                pos += len(part)
        self._pos = pos

    def images(self, sources: tuple[ImageSource, ...]) -> None:
        self._images.extend(sources)

    @property
    def position(self) -> int:
        return self._pos

    def build(self) -> RenderedPrompt:
        return RenderedPrompt(
            "".join(self._parts), tuple(self._ranges), tuple(self._images), tuple(self._reusable)
        )
