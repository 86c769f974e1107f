"""JSON as DeepSeek prompts spell it ("pyjson"): Python-style separators, raw Unicode, two float styles.

Both styles write `", "` / `": "` separators, keep object keys in order and escape strings exactly like
`json.dumps(x, ensure_ascii=False)`. Integers outside the signed/unsigned 64-bit range become floats.
Floats use the shortest round-trip digits:

* `python` (V4.1): Python's `repr` (`1e-05`, `1.5e-07`, `1e+16`);
* `v4` (V4): positional for decimal exponents −5 … 15, otherwise scientific without zero-padding
  the exponent (`0.00001`, `1e-6`, `1.5e-7`, `1e+16`).

Keys that are not strings are spelled as `json` spells them (`true`, `null`, `1`, `1.5`).

Speed: the standard library's C encoder writes the same text for nearly every value (same separators,
same string escapes, `float.__repr__`), so `dumps_v4` / `dumps_python` run it first and keep its text
unless the text shows a number the prompt spells otherwise: a V4 float with a negative exponent
(`1e-06`), or an integer that may lie outside the 64-bit range (19 digits or more). Both are looked for
where a number can start (a string holding the same text only costs a needless run of the Python writer). Then, and on anything the C encoder refuses (NaN, infinities, cycles, unknown
types), the pure-Python writer below decides, so messages and errors are its own. `C_ENCODER = False`
is the off switch; `tests/codecs/test_prompt_json.py` proves both paths equal on drawn values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_encode_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]

_INT_MIN = -(2**63)
_UINT_MAX = 2**64 - 1

C_ENCODER = True  # off switch of the C-encoder path (see the module docstring)


def _refuse(value: Any) -> Any:
    raise TypeError(f"cannot write {type(value).__name__} as prompt JSON")


# markers=None: no cycle bookkeeping (a cycle ends in RecursionError, and the Python writer decides)
_c_encoder = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _refuse, _encode_string, None, ": ", ", ", False, False, False
)
_DIGITS_ONLY = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_DIGIT_RUN = b"0" * 19  # a 64-bit integer has at most 19 digits after a minus, 20 without
_NUMBER_STARTS = frozenset(b"[ ")  # a number value starts the text or follows `[`, `: ` or `, `
_MINUS = ord("-")


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
        out.append(int.__repr__(value) if _INT_MIN <= value <= _UINT_MAX else fmt(float(value)))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not a JSON number")
        out.append(fmt(value if type(value) is float else float(value)))
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
            out.append(_encode_string(key if isinstance(key, str) else _key_text(key)))
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


def _key_text(key: Any) -> str:
    """A non-string object key as `json` writes it (other types: `str(key)`)."""
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, float):
        return float.__repr__(key)
    if isinstance(key, int):
        return int.__repr__(key)
    return str(key)  # `json` refuses these; the C path then falls back here


def _c_text(value: Any, v4_floats: bool) -> str | None:
    """The C encoder's text when it is the prompt's spelling, else None (see the module docstring)."""
    try:
        text = "".join(_c_encoder(value, 0))
    except (ValueError, TypeError, RecursionError):
        return None
    if v4_floats and _digit_before_negative_exponent(text):
        return None
    if _long_integer(text):
        return None
    return text


def _digit_before_negative_exponent(text: str) -> bool:
    """`1e-06`-like text anywhere (a float's repr has a digit right before `e-`)."""
    at = text.find("e-", 1)
    while at > 0:
        if text[at - 1].isdigit():
            return True
        at = text.find("e-", at + 2)
    return False


def _long_integer(text: str) -> bool:
    """A run of 19+ digits where a number can start (a string holding one only costs a needless check)."""
    raw = text.encode("utf-8", "surrogatepass")
    digits = raw.translate(_DIGITS_ONLY)
    at = digits.find(_LONG_DIGIT_RUN)
    while at >= 0:
        before = at - 1 if at and raw[at - 1] == _MINUS else at
        if before == 0 or raw[before - 1] in _NUMBER_STARTS:
            return True
        end = digits.find(b" ", at)  # past this run
        if end < 0:
            return False
        at = digits.find(_LONG_DIGIT_RUN, end)
    return False


def dumps_v4(value: Any) -> str:
    """`value` as V4 prompt JSON."""
    if isinstance(value, str):
        return _encode_string(value)
    if C_ENCODER:
        text = _c_text(value, True)
        if text is not None:
            return text
    out: list[str] = []
    _dump(value, float_v4, out)
    return "".join(out)


def dumps_python(value: Any) -> str:
    """`value` as V4.1 prompt JSON (Python float spelling)."""
    if isinstance(value, str):
        return _encode_string(value)
    if C_ENCODER:
        text = _c_text(value, False)
        if text is not None:
            return text
    out: list[str] = []
    _dump(value, _float_python, out)
    return "".join(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# `json.loads(text, parse_constant=...)` builds a decoder per call (~3 us of ~6 us for small arguments); for a
# `str` it is this decoder's `decode` after a BOM check, whose error is a ValueError too (so `None` either way).
_ARGUMENTS_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_arguments(text: str) -> dict[str, Any] | None:
    """The tool-call arguments as a JSON object, or `None` when they are not one (strict JSON only)."""
    try:
        if type(text) is str:
            value = _ARGUMENTS_DECODER.decode(text)
        else:
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
