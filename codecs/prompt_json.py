"""JSON as DeepSeek prompts spell it ("pyjson"): Python-style separators, raw Unicode, two float styles.

Both styles write `", "` / `": "` separators, keep object keys in order and escape strings exactly like
`json.dumps(x, ensure_ascii=False)`. Integers outside the signed/unsigned 64-bit range become floats.
Floats use the shortest round-trip digits:

* `python` (V4.1): Python's `repr` (`1e-05`, `1.5e-07`, `1e+16`);
* `v4` (V4): positional for decimal exponents −5 … 15, otherwise scientific without zero-padding
  the exponent (`0.00001`, `1e-6`, `1.5e-7`, `1e+16`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_encode_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]

_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1


def float_v4(value: float) -> str:
    """A float in the V4 prompt spelling (see the module docstring)."""
    text = repr(value)
    mark = text.find("e-")
    if mark < 0:
        return text
    exponent = int(text[mark + 2 :])
    mantissa = text[:mark]
    if exponent != 5:
        return f"{mantissa}e-{exponent}"
    sign = ""
    if mantissa.startswith("-"):
        sign, mantissa = "-", mantissa[1:]
    digits = mantissa.replace(".", "")
    return f"{sign}0.0000{digits}"


def _float_python(value: float) -> str:
    return repr(value)


def _dump(value: Any, fmt: Callable[[float], str], out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_encode_string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value) if _INT_MIN <= value <= _UINT_MAX else fmt(float(value)))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not a JSON number")
        out.append(fmt(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(", ")
            first = False
            out.append(_encode_string(key if isinstance(key, str) else str(key)))
            out.append(": ")
            _dump(item, fmt, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(", ")
            _dump(item, fmt, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as prompt JSON")


def dumps_v4(value: Any) -> str:
    """`value` as V4 prompt JSON."""
    if isinstance(value, str):
        return _encode_string(value)
    out: list[str] = []
    _dump(value, float_v4, out)
    return "".join(out)


def dumps_python(value: Any) -> str:
    """`value` as V4.1 prompt JSON (Python float spelling)."""
    if isinstance(value, str):
        return _encode_string(value)
    out: list[str] = []
    _dump(value, _float_python, out)
    return "".join(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_arguments(text: str) -> dict[str, Any] | None:
    """The tool-call arguments as a JSON object, or `None` when they are not one (strict JSON only)."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or _has_non_finite(value):
        return None
    return value


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False
