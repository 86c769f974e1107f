"""Where a message's image placeholders sit in its content."""

from __future__ import annotations

from recipe.conversation import Message


def image_placeholders(m: Message, spelling: str) -> list[int]:
    """Ascending offsets in `m.content` of the placeholders of `m.image_sources`.

    Request conversion records them (`m.image_offsets`); for a directly built message they are the
    first occurrences of `spelling`, one per image source (fewer when the content holds fewer), as the
    reference's message constructors decide. Any other spelling in the content is the client's text.
    """
    if m.image_offsets is not None:
        return list(m.image_offsets)
    found: list[int] = []
    at = m.content.find(spelling)
    while at >= 0 and len(found) < len(m.image_sources):
        found.append(at)
        at = m.content.find(spelling, at + len(spelling))
    return found
