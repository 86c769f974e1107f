"""The request-keyed memos are bounded by bytes, not only by count: schema texts and regex patterns past a
size are checked without being remembered, so distinct huge ones from hostile clients cannot pile up;
answers are the same with and without the memo."""

from __future__ import annotations

import pytest

from recipe.errors import RequestError
from recipe.protocols import fast_metaschema, tools
from recipe.protocols.tools import compact_json, validate_schema_document


def _big_schema(i: int, chars: int) -> dict[str, object]:
    return {"type": "object", "description": f"{i}:" + "d" * chars, "properties": {"a": {"type": "string"}}}


def test_large_schema_texts_are_not_memoized() -> None:
    tools._memo_schema_problem.cache_clear()
    for i in range(30):  # 30 distinct 100 KB schemas: before, each stayed in a 4,096-entry memo
        validate_schema_document(_big_schema(i, 100_000), "")
    assert tools._memo_schema_problem.cache_info().currsize == 0
    for i in range(30):
        validate_schema_document(_big_schema(i, 100), "")
    info = tools._memo_schema_problem.cache_info()
    assert info.currsize == 30 and info.maxsize * tools.SCHEMA_MEMO_MAX_CHARS <= 16 * 1024 * 1024


def test_large_regex_patterns_are_not_memoized() -> None:
    fast_metaschema._memo_compiles.cache_clear()
    for i in range(20):
        assert fast_metaschema._regex_ok(f"a{i}" + "b" * 10_000)
    assert fast_metaschema._memo_compiles.cache_info().currsize == 0
    assert fast_metaschema._regex_ok("ab+c") and not fast_metaschema._regex_ok("(unclosed")
    assert fast_metaschema._memo_compiles.cache_info().currsize == 2


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"x": {"type": "integer", "minimum": 1}}},
    {"type": "nope"},
    {"$ref": "#/$defs/missing"},
    {"type": "string", "pattern": "(unclosed"},
    [1, 2],
    True,
    _big_schema(0, 20_000),
    {**_big_schema(1, 20_000), "type": 7},
])
def test_the_memo_changes_no_answer(schema: object) -> None:
    text = compact_json(schema)
    assert tools._schema_problem(text) == tools._check_schema(text) == tools._memo_schema_problem(text)
    try:
        validate_schema_document(schema, "p: ")
        outcome = None
    except RequestError as exc:
        outcome = str(exc)
    assert (outcome is None) == (tools._check_schema(text) is None)
