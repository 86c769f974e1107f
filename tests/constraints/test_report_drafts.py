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


def test_a_format_a_later_draft_defined_asserts_nothing(tok) -> None:
    """`uuid` is a format from 2019-09 on and `date` from 07: earlier, an unknown name that asserts nothing
    (`jsonschema` agrees), so the mask must not refuse what it would refuse from those drafts on."""
    from recipe.constraints.report import validate_value

    for draft, fmt, text in (("draft-07", "uuid", '"not-a-uuid"'), ("draft-04", "date", '"soon"')):
        old = {"$schema": f"http://json-schema.org/{draft}/schema#", "type": "string", "format": fmt}
        new = {"type": "string", "format": fmt}
        assert not validate_value(old, text.strip('"')) and validate_value(new, text.strip('"'))
        c = compile_constraint("json_schema", old, tok, strict=True, cache=None)
        assert c.report is not None and c.report.enforced_exactly
        assert check_text(c, text, tok).accepted
        assert not check_text(compile_constraint("json_schema", new, tok, cache=None), text, tok).accepted
