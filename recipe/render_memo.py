"""The prompts of the last few rendered requests, by object identity, so `encode` after `render` renders once.

`recipe.codec`'s documented use is `render(req)` (the prompt, its image sources) and then `encode(req,
tokenizer)`, which needs the same rendering: ~60 µs of a ~700 µs cold Chat request (bench/codec.py). Conversion
builds frozen values that are never mutated afterwards (`recipe.conversation`), so the same request object
renders to the same prompt; the memo keys on the object's identity (never its value: hashing a conversation
costs more than rendering it) and holds the object itself, so its id cannot be reused while it is remembered.
At most `MAX_ENTRIES` requests (cleared whole when full); the memo returns the very `RenderedPrompt` object
rendered before, which is frozen too. Off switch: `RenderMemo.enabled = False` (every call renders).
"""

from __future__ import annotations

from typing import ClassVar

from recipe.codecs.rendered import RenderedPrompt
from recipe.conversation import Conversation, ModelVersion


class RenderMemo:
    """Rendered prompts of recently rendered conversations, keyed by `id(conversation)` and the version."""

    enabled: ClassVar[bool] = True
    MAX_ENTRIES: ClassVar[int] = 16

    def __init__(self) -> None:
        self._entries: dict[tuple[int, ModelVersion], tuple[Conversation, RenderedPrompt]] = {}

    def get(self, conversation: Conversation, version: ModelVersion) -> RenderedPrompt | None:
        """The prompt `put` for this very object and version, or None."""
        if not RenderMemo.enabled:
            return None
        entry = self._entries.get((id(conversation), version))
        if entry is None or entry[0] is not conversation:
            return None
        return entry[1]

    def put(self, conversation: Conversation, version: ModelVersion, rendered: RenderedPrompt) -> None:
        if not RenderMemo.enabled:
            return
        if len(self._entries) >= RenderMemo.MAX_ENTRIES:
            self._entries.clear()
        self._entries[(id(conversation), version)] = (conversation, rendered)

    def clear(self) -> None:
        self._entries.clear()
