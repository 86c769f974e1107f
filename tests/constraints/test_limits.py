"""Abuse limits: spec size and depth, compile timeout off the caller's thread, byte-bounded cache."""

from __future__ import annotations

import threading
import time

import pytest

from recipe.constraints import ConstraintError, compile_constraint
from recipe.constraints.limits import ByteBoundedCache, Limits, run_with_timeout


def test_oversized_and_too_deep_schemas_are_refused(tok) -> None:
    big = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100}
                                            for i in range(100)}}
    with pytest.raises(ConstraintError, match="bytes; the limit is"):
        compile_constraint("json_schema", big, tok, limits=Limits(max_spec_bytes=4096))
    deep: dict = {"type": "array"}
    node = deep
    for _ in range(100):
        node["items"] = {"type": "array"}
        node = node["items"]
    with pytest.raises(ConstraintError, match="deeper than 64"):
        compile_constraint("json_schema", deep, tok)


def test_bad_specs_get_clear_errors(tok) -> None:
    for kind, spec, pat in [
        ("json_schema", "{not json", "not valid JSON"),
        ("json_schema", 42, "must be an object or a boolean"),
        ("json_schema", {"type": "string", "pattern": "(unclosed"}, "llguidance"),
        ("json_schema", {"allOf": [{"type": "string"}, {"type": "integer"}]}, "admits no value"),
        ("regex", "(a", "llguidance"),
        ("nonsense", "", "unknown constraint kind"),
    ]:
        with pytest.raises(ConstraintError, match=pat) as info:
            compile_constraint(kind, spec, tok, strict=False)
        assert "Traceback" not in info.value.message
    with pytest.raises(ConstraintError, match="unknown constraint backend"):
        compile_constraint("regex", "a", tok, backend="bogus")


def test_strict_refuses_what_the_mask_cannot_enforce(tok) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    with pytest.raises(ConstraintError, match="uniqueItems"):
        compile_constraint("json_schema", schema, tok, strict=True)
    c = compile_constraint("json_schema", schema, tok, strict=False)
    assert c.report is not None and c.report.post == ("uniqueItems",) and not c.report.enforced_exactly
    assert c.validate("[1,1]") and not c.validate("[1,2]")


def test_compile_runs_off_thread_with_a_timeout() -> None:
    caller = threading.get_ident()
    assert run_with_timeout(threading.get_ident, 5, "x") != caller
    t0 = time.perf_counter()
    with pytest.raises(ConstraintError, match=r"took longer than 0\.05 s"):
        run_with_timeout(lambda: time.sleep(2), 0.05, "the test constraint")
    assert time.perf_counter() - t0 < 1.0


def test_compile_timeout_reaches_the_caller(tok, monkeypatch) -> None:
    import recipe.constraints.compiler as compiler

    class SlowBackend:  # stands in for a runaway native compile (outlines-core on a bounded string)
        name = "outlines"
        kinds = frozenset({"regex"})

        def compile(self, kind, source, vocab, *, lenient):
            time.sleep(1.5)
            raise AssertionError("should have timed out first")

    monkeypatch.setattr(compiler, "get_backend", lambda name: SlowBackend())
    compiler.vocabulary_of(tok, None)  # built (and memoised) outside the timed window: seconds on a loaded machine
    t0 = time.perf_counter()
    with pytest.raises(ConstraintError, match=r"took longer than 0\.2 s"):
        compile_constraint("regex", "a+", tok, backend="outlines", strict=False, timeout_s=0.2, cache=None)
    assert time.perf_counter() - t0 < 1.0


def test_cache_is_bounded_in_bytes() -> None:
    c = ByteBoundedCache(100)
    for i in range(10):
        c.put(i, f"v{i}", 30)
        assert c.size_bytes <= 100
    assert len(c) == 3 and c.get(9) == "v9" and c.get(0) is None
    c.put("huge", "x", 101)
    assert c.get("huge") is None
    c.get(7)
    c.put("new", "n", 30)
    assert c.get(7) == "v7" and c.get(8) is None  # least recently used went first


def test_compiled_constraints_are_cached(tok) -> None:
    cache = ByteBoundedCache(1 << 20)
    a = compile_constraint("json_schema", {"type": "integer", "minimum": 3}, tok, cache=cache)
    b = compile_constraint("json_schema", '{"minimum": 3, "type": "integer"}', tok, cache=cache)
    assert a is b and cache.hits == 1
    assert 0 < cache.size_bytes <= 1 << 20


def test_report_names_the_keyword_the_backend_refused(tok) -> None:
    from recipe.constraints import schema_report

    r = schema_report({"type": "object", "properties": {"a": {"type": "string"}}, "minProperties": 1}, tok)
    assert r.post == ("minProperties",) and set(r.exact) == {"type", "properties"}
    r = schema_report({"type": "string", "format": "regex"}, tok)
    assert r.post == ("format",) and "regex" in r.backend_message
    r = schema_report({"type": "object", "dependentRequired": {"a": ["b"]}, "title": "t"}, tok)
    assert r.enforced_exactly and "dependentRequired" in r.rewritten and r.annotations == ("title",)


_FORMATS = ("date", "time", "date-time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
            "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
            "relative-json-pointer", "regex", "phone")


@pytest.mark.parametrize("fmt", _FORMATS)
def test_a_format_is_masked_post_checked_or_named_as_unchecked(tok, fmt: str) -> None:
    """`MASK_FORMATS` is what the backend's strict compile accepts; a format outside it is post-checked only
    where `jsonschema` has a checker for it, else reported unsupported and named in the strict refusal (a
    post-check that asserts nothing would be a silent partial constraint)."""
    import jsonschema

    from recipe.constraints.report import MASK_FORMATS

    schema = {"type": "string", "format": fmt}
    if fmt in MASK_FORMATS:
        c = compile_constraint("json_schema", schema, tok, strict=True, cache=None)
        assert c.report is not None and c.report.enforced_exactly
        return
    with pytest.raises(ConstraintError) as exc:
        compile_constraint("json_schema", schema, tok, strict=True, cache=None)
    r = compile_constraint("json_schema", schema, tok, strict=False, cache=None).report
    assert r is not None and not r.enforced_exactly
    if fmt in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers:
        assert r.post == ("format",) and r.unsupported == ()
    else:
        assert r.unsupported == ("format",) and r.post == () and r.details["unchecked_formats"] == [fmt]
        assert f"neither the mask nor the post-check asserts the format {fmt}" in exc.value.message
