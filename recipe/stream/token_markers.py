"""Marker spellings for token-id input.

With token ids, the reference recognises markers by their special tokens only: `</think>` is the
special id, the DSML opener is `<` followed by the special `｜DSML｜` id; the same characters spelled
with plain tokens are ordinary text. The processor therefore writes those special tokens into the
parsed text as private-use sentinel characters, the parsers match the sentinel spellings, and every
emitted text maps the sentinels back to their spellings.
"""

from __future__ import annotations

THINK_END_SENTINEL = "\ue001"
DSML_SENTINEL = "\ue002"

SENTINEL_OF = {"</think>": THINK_END_SENTINEL, "｜DSML｜": DSML_SENTINEL}
_SPELLING = {THINK_END_SENTINEL: "</think>", DSML_SENTINEL: "｜DSML｜"}
_TABLE = str.maketrans(_SPELLING)


def unmask(text: str) -> str:
    """`text` with sentinels replaced by their special-token spellings."""
    if "\ue001" in text or "\ue002" in text:
        return text.translate(_TABLE)
    return text
