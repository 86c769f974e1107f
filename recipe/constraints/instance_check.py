"""Walk a value's tokens through a matcher: the check behind `recipe constrain check` and the suite runs.

A value is serialised compactly (`separators=(",", ":")`, no ASCII escaping; integral floats written as
integers, since JSON Schema makes 1.0 and 1 the same number), tokenized as plain text, and accepted when
every id is allowed by the mask at its step and the matcher can terminate after the last one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from recipe.constraints import bitmask
from recipe.constraints.backend import CompiledConstraint
from recipe.tokenizer import Tokenizer


def _canon(v: Any) -> Any:
    if isinstance(v, float) and math.isfinite(v) and v == int(v) and abs(v) < 2**63:
        return int(v)
    if isinstance(v, list):
        return [_canon(x) for x in v]
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    return v


def serialise(value: Any) -> str:
    """Compact canonical JSON of a value."""
    return json.dumps(_canon(value), separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Walk:
    accepted: bool
    steps: int
    masked_at: int | None = None  # index of the first id the mask refused
    unsound_steps: int = 0  # mask allowed an id the matcher then refused (must stay 0)


def walk_ids(compiled: CompiledConstraint, ids: list[int]) -> Walk:
    """Mask check + accept for each id, then EOS allowed iff the matcher can terminate."""
    m = compiled.matcher()
    mask = compiled.allocate_bitmask()
    for n, t in enumerate(ids):
        m.fill_bitmask(mask)
        if not bitmask.is_allowed(mask, t):
            return Walk(False, n, masked_at=n)
        if not m.accept(t):
            return Walk(False, n, masked_at=n, unsound_steps=1)
    m.fill_bitmask(mask)
    eos_ok = any(bitmask.is_allowed(mask, e) for e in compiled.eos_token_ids)
    return Walk(m.can_terminate() and eos_ok, len(ids))


def check_text(compiled: CompiledConstraint, text: str, tokenizer: Tokenizer) -> Walk:
    return walk_ids(compiled, tokenizer.encode_plain(text))


def check_value(compiled: CompiledConstraint, value: Any, tokenizer: Tokenizer) -> Walk:
    """For regex/grammar kinds a string value is walked as is; otherwise its compact JSON."""
    if compiled.kind in ("regex", "grammar") and isinstance(value, str):
        return check_text(compiled, value, tokenizer)
    return check_text(compiled, serialise(value), tokenizer)
