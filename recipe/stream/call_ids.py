"""Tool-call ids in the reference's form: `call_<NN>_<24 random alphanumerics>`."""

from __future__ import annotations

import random
import string

_ALPHABET = string.ascii_letters + string.digits
_RANDOM = random.SystemRandom()


def new_call_id(index: int) -> str:
    """A fresh id for call `index` (two-digit index, then 24 random letters and digits)."""
    return f"call_{index:02d}_" + "".join(_RANDOM.choices(_ALPHABET, k=24))
