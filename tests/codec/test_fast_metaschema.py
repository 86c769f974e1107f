"""The compiled metaschema pre-check never calls valid what Python `jsonschema` (the message source) rejects."""

from __future__ import annotations

import gzip
import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recipe.protocols.fast_metaschema import definitely_valid
from recipe.protocols.tools import _metaschema_validator, compact_json

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "requests.jsonl.gz"

KEYWORDS = [
    "type", "properties", "items", "prefixItems", "required", "enum", "const", "pattern", "patternProperties",
    "additionalProperties", "anyOf", "allOf", "oneOf", "not", "$ref", "$defs", "$id", "$anchor", "$dynamicRef",
    "$dynamicAnchor", "$schema", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "multipleOf",
    "minItems", "uniqueItems", "format", "description", "title", "default", "examples", "dependentRequired",
    "dependentSchemas", "propertyNames", "contains", "minContains", "if", "then", "else", "contentEncoding",
    "unevaluatedProperties", "$vocabulary", "$comment", "deprecated", "readOnly", "x-custom",
]  # fmt: skip
TYPES = ["string", "number", "integer", "boolean", "array", "object", "null", "foo"]
REGEX_BITS = [
    "a",
    "(",
    ")",
    "[",
    "]",
    "{2,1}",
    "{1,2}",
    "\\d",
    "\\p{L}",
    "\\z",
    "\\Z",
    "(?P<n>x)",
    "(?<=a)",
    "*",
    "+",
    "?",
    "^",
    "$",
    "|",
    "\\",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(TYPES),
    st.text(max_size=6),
    st.lists(st.sampled_from(REGEX_BITS), max_size=5).map("".join),
    st.sampled_from(["#", "#/$defs/a", "#foo", "a#b", "http://x/y", "abc\n", "_a.b-c", "1a"]),
)


def _json(children: Any) -> Any:
    keys = st.one_of(
        st.sampled_from(KEYWORDS), st.lists(st.sampled_from(REGEX_BITS), min_size=1, max_size=3).map("".join)
    )
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
        st.lists(st.sampled_from(TYPES), max_size=3),
    )


documents = st.recursive(scalars, _json, max_leaves=25)


def _python_valid(schema: Any) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(iter(_metaschema_validator().iter_errors(schema)), None) is None


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_compiled_valid_implies_python_valid(schema: Any) -> None:
    if definitely_valid(schema) or definitely_valid(schema, compact_json(schema)):
        assert _python_valid(schema), schema


def test_invalid_regex_goes_to_the_python_check() -> None:
    for pattern in ["((", "a{2,1}", "\\p{L}+", "\\z"]:
        schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": pattern}}}
        assert not definitely_valid(schema)
        assert not _python_valid(schema)
        assert not definitely_valid({"patternProperties": {pattern: {}}})


def test_golden_tool_schemas_take_the_compiled_path() -> None:
    """The pre-check is not vacuous: every golden tool schema the Python check accepts passes it too
    (without jsonschema-rs installed, an environment not yet re-set-up, it answers False for all)."""
    compiled = importlib.util.find_spec("jsonschema_rs") is not None
    distinct: dict[str, Any] = {}
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            for tool in (case.get("conversation") or {}).get("tools") or []:
                params = tool.get("parameters")
                if isinstance(params, dict):
                    distinct.setdefault(json.dumps(params, sort_keys=True), params)
    checked = [p for p in list(distinct.values())[:200] if _python_valid(p)]
    assert len(checked) > 100
    for params in checked:
        assert definitely_valid(params) is compiled, params
