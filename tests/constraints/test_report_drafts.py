"""The keyword report names an older draft's keywords by what they became: `dependencies` and `additionalItems`
are enforced when their 2020-12 spelling is, and draft-04's `id` is an identifier, not an assertion."""

from __future__ import annotations

from recipe.constraints import compile_constraint
from recipe.constraints.instance_check import check_text, check_value


def test_upgraded_keywords_are_reported_by_what_enforces_them(tok) -> None:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "id": "x", "type": "object",
              "properties": {"t": {"type": "array", "items": [{"type": "string"}], "additionalItems": False},
                             "u": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}},
              "dependencies": {"a": ["b"]}}
    c = compile_constraint("json_schema", schema, tok, strict=False, cache=None)
    assert c.report is not None
    assert "uniqueItems" in c.report.post  # the one keyword the mask leaves to the post-check
    assert {"dependencies", "additionalItems"} <= set(c.report.exact), c.report
    assert "id" in c.report.annotations
    assert not check_value(c, {"a": 1}, tok).accepted  # dependencies: `a` needs `b`
    assert not check_value(c, {"t": ["x", "y"]}, tok).accepted  # additionalItems: false
    assert check_text(c, '{"t":["x"],"b":2,"a":1}', tok).accepted  # the order the mask generates
