"""Tool-call ids in the reference's form: `call_<NN>_<24 random alphanumerics>`."""

from __future__ import annotations

import os
import string

_ALPHABET = string.ascii_letters + string.digits


def new_call_id(index: int) -> str:
    """A fresh id for call `index`: two-digit index, then 24 letters and digits from 144 random bits."""
    n = int.from_bytes(os.urandom(18), "big")
    chars = []
    for _ in range(24):
        n, r = divmod(n, 62)
        chars.append(_ALPHABET[r])
    return f"call_{index:02d}_" + "".join(chars)
