"""Prompt JSON: the C-encoder path writes exactly what the pure-Python writer writes (its off switch).

The values are drawn widely: JSON values with floats of every exponent (V4 spells negative exponents its
own way), integers around and beyond the 64-bit range, escapes, lone surrogates, non-string keys, int and
float subclasses, NaN/infinities and unknown types (which must fail the same way on both paths).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.codecs import prompt_json
from recipe.codecs.prompt_json import dumps_python, dumps_v4


class _Int(int):
    def __str__(self) -> str:
        return "not-an-int"


class _Float(float):
    def __repr__(self) -> str:
        return "not-a-float"


_BIG = 2**64
_ints = st.one_of(
    st.integers(),
    st.integers(-(2**63) - 3, -(2**63) + 3),
    st.integers(2**64 - 3, 2**64 + 3),
    st.integers(-(10**25), 10**25),
    st.sampled_from([10**18, 10**19 - 1, 10**19, -(10**18), -(10**19)]),
)
_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.builds(lambda m, e: m * 10.0**e, st.floats(-10, 10, allow_nan=False), st.integers(-30, 30)),
    st.sampled_from([1e-5, 1.5e-5, -1e-5, 1e-6, 1e-7, 1e16, 1e15, 0.0, -0.0, 123456789012345678901.0]),
)
_texts = st.one_of(
    st.text(),
    st.text(alphabet="0123456789e-+. \"\\\n\u2028\ud800"),
    st.sampled_from(["1e-05", "x1e-6", "12345678901234567890", "-1234567890123456789"]),
)
_scalars = st.one_of(st.none(), st.booleans(), _ints, _floats, _texts)
_keys = st.one_of(_texts, st.booleans(), st.none(), _ints, _floats)


def _values(keys: Any) -> Any:
    return st.recursive(
        _scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.lists(inner, max_size=4).map(tuple),
            st.dictionaries(keys, inner, max_size=5),
        ),
        max_leaves=25,
    )


def _both(dumps: Any, value: Any) -> tuple[Any, Any]:
    """(fast, reference): each the text or the exception type and message."""

    def run() -> Any:
        try:
            return dumps(value)
        except Exception as exc:
            return (type(exc), str(exc))

    fast = run()
    prompt_json.C_ENCODER = False
    try:
        slow = run()
    finally:
        prompt_json.C_ENCODER = True
    return fast, slow


@settings(max_examples=600, deadline=None)
@given(_values(_texts))
def test_c_path_equals_python_writer_on_json_values(value: Any) -> None:
    for dumps in (dumps_v4, dumps_python):
        fast, slow = _both(dumps, value)
        assert fast == slow


@settings(max_examples=300, deadline=None)
@given(_values(_keys))
def test_c_path_equals_python_writer_with_non_string_keys(value: Any) -> None:
    for dumps in (dumps_v4, dumps_python):
        fast, slow = _both(dumps, value)
        assert fast == slow


@pytest.mark.parametrize(
    "value",
    [
        {"a": math.nan},
        [math.inf],
        {"x": -math.inf},
        {"a": object()},
        {(1, 2): 1},
        [_Int(3), _Float(0.5), _Float(1e-7)],
        {"n": _BIG, "m": -(2**63) - 1, "k": 2**64 - 1, "j": -(2**63)},
        {"f": [1e-5, 2.5e-9, 1e16, 0.1]},
    ],
)
def test_edge_values_agree(value: Any) -> None:
    for dumps in (dumps_v4, dumps_python):
        fast, slow = _both(dumps, value)
        assert fast == slow


def test_cycles_fail_alike() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    for dumps in (dumps_v4, dumps_python):
        fast, slow = _both(dumps, cyclic)
        assert fast[0] is slow[0] is RecursionError


def test_spellings() -> None:
    """What the C path must not keep: V4's negative exponents and integers beyond 64 bits."""
    assert dumps_v4({"a": 1e-6, "b": 1e-5, "c": 1e16}) == '{"a": 1e-6, "b": 0.00001, "c": 1e+16}'
    assert dumps_python({"a": 1e-6, "b": 1e-5}) == '{"a": 1e-06, "b": 1e-05}'
    assert dumps_v4([2**64, -(2**63) - 1]) == "[1.8446744073709552e+19, -9.223372036854776e+18]"
    assert dumps_v4({True: 1, None: [], 1.5: "é\n"}) == '{"true": 1, "null": [], "1.5": "é\\n"}'


def _arguments_oracle(text: str) -> Any:
    """`parse_arguments` as written before its decoder was shared: `json.loads` with a fresh decoder."""
    import json

    def reject(name: str) -> Any:
        raise ValueError(name)

    try:
        value = json.loads(text, parse_constant=reject)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or prompt_json._has_non_finite(value):
        return None
    return value


_ARGUMENT_BITS = st.sampled_from(['{"a": 1}', '{"k": "a\tb"}', '"\x01"', "\ufeff", "NaN", "Infinity", "-Infinity", "1e999", " ", "\n", "[", "]",
                                  "{", "}", '"k"', ":", ",", "null", "true", "1.5", '"\\ud800"', "[]", "{}", '"'])


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    _values(_texts).map(lambda v: __import__("json").dumps(v, ensure_ascii=False, allow_nan=True)),
    st.lists(st.one_of(_ARGUMENT_BITS, st.text(max_size=5)), max_size=12).map("".join),
))
def test_parse_arguments_equals_json_loads(text: str) -> None:
    got = prompt_json.parse_arguments(text)
    want = _arguments_oracle(text)
    assert got == want and type(got) is type(want)
    if got is not None:
        assert list(got) == list(want)  # same key order
