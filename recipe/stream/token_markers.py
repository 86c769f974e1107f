"""Marker spellings for token-id input.

With token ids, the reference recognises markers by their special tokens only: `</think>` is the
special id, the DSML opener is `<` followed by the special `｜DSML｜` id; the same characters spelled
with plain tokens are ordinary text. Any other special token is one opaque unit: a stop sequence
never matches inside or across it. The processor therefore writes every special token into the parsed
text as one private-use sentinel character, the parsers match the sentinel spellings, and every
emitted text maps the sentinels back to their spellings.
"""

from __future__ import annotations

import re

THINK_END_SENTINEL = "\ue001"
DSML_SENTINEL = "\ue002"

SENTINEL_OF = {"</think>": THINK_END_SENTINEL, "｜DSML｜": DSML_SENTINEL}
_FIRST_FREE = 0xE010
_LAST = 0xF8FF  # end of the Basic Multilingual Plane's private use area
_SPELLING = {THINK_END_SENTINEL: "</think>", DSML_SENTINEL: "｜DSML｜"}
_TABLE = str.maketrans(_SPELLING)
_ANY = re.compile("[\ue001\ue002]")


def sentinel_for(spelling: str) -> str:
    """The sentinel character of a special token spelling (the same for every tokenizer)."""
    return sentinels_for([spelling])[0]


def sentinels_for(spellings: list[str]) -> list[str]:
    """The sentinel characters of special token spellings, registering new ones in one step."""
    global _TABLE, _ANY
    out = []
    added = False
    for spelling in spellings:
        sentinel = SENTINEL_OF.get(spelling)
        if sentinel is None:
            code = _FIRST_FREE + len(SENTINEL_OF) - 2
            if code > _LAST:
                raise ValueError("too many special token spellings for the private use area")
            sentinel = SENTINEL_OF[spelling] = chr(code)
            _SPELLING[sentinel] = spelling
            added = True
        out.append(sentinel)
    if added:
        last = chr(_FIRST_FREE + len(SENTINEL_OF) - 3)
        _TABLE = str.maketrans(_SPELLING)
        _ANY = re.compile("[\ue001\ue002" + (chr(_FIRST_FREE) + "-" + last if len(SENTINEL_OF) > 2 else "") + "]")
    return out


def unmask(text: str) -> str:
    """`text` with sentinels replaced by their special-token spellings."""
    if _ANY.search(text) is not None:
        return text.translate(_TABLE)
    return text
