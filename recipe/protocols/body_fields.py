"""Typed readers for decoded request bodies, rejecting wrong shapes with the reference's messages.

The reference deserialises bodies with serde; its messages name what was found and what was
expected (``invalid type: string "x", expected u32``). These readers check one value each and raise
a parse `RequestError` with the same words, prefixed `invalid request body: `. Callers walk object
keys in document order, as serde does, so the first offending field wins; missing required fields
are reported after the walk.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from recipe.errors import RequestError, parse_error
from recipe.protocols.json_syntax import load_json

U8_MAX = 2**8 - 1
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def fail(message: str) -> NoReturn:
    raise parse_error(f"invalid request body: {message}")


def _rust_debug_str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\0":
            out.append("\\0")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _float_text(x: float) -> str:
    if math.isfinite(x):
        return repr(x)
    return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def unexpected(value: Any) -> str:
    """serde's description of a JSON value it did not expect."""
    if value is None:
        return "null"
    if value is True or value is False:
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{_float_text(value)}`"
    if isinstance(value, str):
        return f"string {_rust_debug_str(value)}"
    if isinstance(value, list):
        return "sequence"
    return "map"


def invalid_type(value: Any, expected: str) -> NoReturn:
    fail(f"invalid type: {unexpected(value)}, expected {expected}")


def missing(field: str) -> NoReturn:
    fail(f"missing field `{field}`")


def unknown_variant(value: str, variants: Sequence[str]) -> NoReturn:
    if len(variants) == 1:
        fail(f"unknown variant `{value}`, expected `{variants[0]}`")
    if len(variants) == 2:
        fail(f"unknown variant `{value}`, expected `{variants[0]}` or `{variants[1]}`")
    listed = ", ".join(f"`{v}`" for v in variants)
    fail(f"unknown variant `{value}`, expected one of {listed}")


def string(value: Any) -> str:
    if not isinstance(value, str):
        invalid_type(value, "a string")
    return value


def opt_string(value: Any) -> str | None:
    return None if value is None else string(value)


def boolean(value: Any) -> bool:
    if value is not True and value is not False:
        invalid_type(value, "a boolean")
    return value


def opt_bool(value: Any) -> bool | None:
    return None if value is None else boolean(value)


def unsigned(value: Any, bits: int) -> int:
    """An unsigned integer of `bits` bits (serde's `u8`/`u32`/`u64`)."""
    name = f"u{bits}"
    if isinstance(value, bool) or not isinstance(value, int):
        invalid_type(value, name)
    if value < 0 or value >= 2**bits:
        fail(f"invalid value: integer `{value}`, expected {name}")
    return value


def opt_unsigned(value: Any, bits: int) -> int | None:
    return None if value is None else unsigned(value, bits)


def float32(value: Any) -> float:
    """A number read as serde's `f32` (integers accepted); returns the f32-rounded value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        invalid_type(value, "f32")
    return to_f32(float(value))


def opt_float32(value: Any) -> float | None:
    return None if value is None else float32(value)


_F32 = struct.Struct("f")


def to_f32(x: float) -> float:
    """`x` rounded to the nearest 32-bit float (serde reads these fields as `f32`)."""
    try:
        return float(_F32.unpack(_F32.pack(x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def sequence(value: Any) -> list[Any]:
    if not isinstance(value, list):
        invalid_type(value, "a sequence")
    return value


def each(reader: Callable[[Any], Any], *, optional: bool = True) -> Callable[[Any], None]:
    """A reader of a sequence whose items `reader` checks (null allowed when `optional`)."""

    def read(value: Any) -> None:
        if value is None and optional:
            return
        for item in sequence(value):
            reader(item)

    return read


def optional(reader: Callable[[Any], Any]) -> Callable[[Any], None]:
    """`reader` for a value that may be null."""

    def read(value: Any) -> None:
        if value is not None:
            reader(value)

    return read


def mapping(
    value: Any, struct_name: str, n_fields: int | None = None, first: Callable[[Any], Any] | None = None
) -> dict[str, Any]:
    """An object for a serde struct named `struct_name` with `n_fields` fields.

    serde also reads a struct from an array, positionally: `first` checks element 0 (the first
    field); Recipe then rejects the array with serde's length message.
    """
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and n_fields is not None:
        if value and first is not None:
            first(value[0])
        n = min(len(value), 1) if first is None else len(value)
        fail(f"invalid length {n}, expected struct {struct_name} with {n_fields} element{'' if n_fields == 1 else 's'}")
    invalid_type(value, f"struct {struct_name}")


def unit_variant(value: Any, variants: Sequence[str]) -> str:
    """A unit variant of an externally tagged enum: a string, or a map with one key."""
    if isinstance(value, str):
        name = value
    elif isinstance(value, dict):
        if len(value) != 1:
            fail("invalid value: map, expected map with a single key")
        name = next(iter(value))
    else:
        invalid_type(value, "string or map")
    if name not in variants:
        unknown_variant(name, variants)
    return name


def variant(value: Any, variants: Sequence[str]) -> str:
    """A unit enum given as a string."""
    if not isinstance(value, str):
        invalid_type(value, "variant identifier")
    if value not in variants:
        unknown_variant(value, variants)
    return value


def tag(obj: dict[str, Any], key: str, variants: Sequence[str], enum_name: str) -> str:
    """The tag of an internally tagged enum (`{"type": ...}`)."""
    if key not in obj:
        missing(key)
    value = obj[key]
    if not isinstance(value, str):
        invalid_type(value, "variant identifier")
    if value not in variants:
        unknown_variant(value, variants)
    return value


def tagged_object(value: Any, enum_name: str, tag_name: str = "type") -> dict[str, Any]:
    """An object of an internally tagged enum (an array would carry the tag first: rejected)."""
    if isinstance(value, list):
        if not value:
            fail(f"missing field `{tag_name}`")
        first = value[0]
        if not isinstance(first, str):
            invalid_type(first, "variant identifier")
        fail(f"invalid type: sequence, expected internally tagged enum {enum_name}")
    if not isinstance(value, dict):
        invalid_type(value, f"internally tagged enum {enum_name}")
    return value


__all__ = ["U8_MAX", "U32_MAX", "U64_MAX", "RequestError"]


def request_body(
    body: bytes | str | dict[str, Any],
    struct_name: str,
    struct_fields: int,
    first_field: str,
    readers: dict[str, Callable[[Any], Any]],
    required: Sequence[str],
) -> dict[str, Any]:
    """A request body decoded and shape-checked like the reference's deserialiser: a JSON array is read
    as the struct's fields in order (so its first element must be `first_field`), each known field is
    checked by its reader, then the `required` fields are looked for in that order."""
    obj = body if isinstance(body, dict) else load_json(body)
    if isinstance(obj, list):
        if not obj:
            fail(f"invalid length 0, expected struct {struct_name} with {struct_fields} elements")
        invalid_type(obj[0], first_field)
    obj = mapping(obj, struct_name)
    for key, value in obj.items():
        reader = readers.get(key)
        if reader is not None:
            reader(value)
    for req in required:
        if req not in obj:
            missing(req)
    return obj

