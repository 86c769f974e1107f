"""JSON text as the reference writes it into conversations: `", "`/`": "` separators, raw non-ASCII.

Equal to Python's `json.dumps(x, ensure_ascii=False)` except for floats, which use the shortest
round-trip digits with positional notation for decimal exponents -5..15 and unpadded exponents
otherwise (`0.00001`, `1e-6`, `1e+16`) — exactly orjson's float spelling.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_encode_str = json.encoder.py_encode_basestring  # type: ignore[attr-defined]
_c_encode_str = getattr(json.encoder, "c_encode_basestring", None) or _encode_str


def _float(x: float) -> str:
    if x != x or x in (float("inf"), float("-inf")):
        return "null"
    return orjson.dumps(x).decode("ascii")


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_c_encode_str(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if -(2**63) <= value < 2**64:
            out.append(str(value))
        else:
            out.append(_float(float(value)))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        out.append("{")
        first = True
        for k, v in value.items():
            if not first:
                out.append(", ")
            first = False
            out.append(_c_encode_str(str(k)))
            out.append(": ")
            _write(v, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(", ")
            _write(v, out)
        out.append("]")
    else:
        raise TypeError(f"not JSON: {type(value).__name__}")


def dumps(value: Any) -> str:
    """`value` as spaced JSON text (see module docstring)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)
