"""The output of every codec's `render`: prompt text and the code-point ranges that are special tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

from recipe.conversation import ImageSource


@dataclass(frozen=True)
class RenderedPrompt:
    """`prompt[start:end]` for each range in `special_ranges` is one special-token spelling.

    Ranges are ascending, disjoint, half-open code-point offsets; everything between them is plain text.
    `reusable_spans` (not part of equality) marks plain spans whose text repeats across requests (template
    text, tool lists, response schemas); `recipe.encoding` reuses their ids where it proves the cut cannot
    change tokenization.
    """

    prompt: str
    special_ranges: tuple[tuple[int, int], ...] = ()
    image_sources: tuple[ImageSource, ...] = ()
    reusable_spans: tuple[tuple[int, int], ...] = field(default=(), compare=False, repr=False)
