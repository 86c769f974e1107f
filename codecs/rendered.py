"""The output of every codec's `render`: prompt text and the code-point ranges that are special tokens."""

from __future__ import annotations

from dataclasses import dataclass

from recipe.conversation import ImageSource


@dataclass(frozen=True)
class RenderedPrompt:
    """`prompt[start:end]` for each range in `special_ranges` is one special-token spelling.

    Ranges are ascending, disjoint, half-open code-point offsets; everything between them is plain text.
    """

    prompt: str
    special_ranges: tuple[tuple[int, int], ...] = ()
    image_sources: tuple[ImageSource, ...] = ()
