"""`compile_constraint`: spec checks, normalisation, the keyword report, backend choice, timeout, cache.

Default backend (`DEFAULT_BACKEND`): llguidance for every kind. Measured on the DeepSeek V4 vocabulary
(bench/constraints.py, tests/constraints/suite_figures.json) it compiles in about a millisecond (xgrammar
10-80 ms), is the only backend that refuses what it cannot enforce (so `strict=True` can be honoured), and
after Recipe's normalisation scores best on the JSON-Schema-Test-Suite. xgrammar's per-token lead (p50 9 µs
vs 24 µs on any-object) disappears once JSON whitespace is bounded as Recipe requires (p50 20 µs, mean
53-82 µs, same run), so it is not the default even for json_object. `backend="xgrammar"` (optional extra)
and `backend="outlines"` remain available.

`strict=True`: the mask must enforce the whole schema; anything else raises `ConstraintError` naming the
keywords. `strict=False`: the mask enforces what it can and `CompiledConstraint.validate(text)` checks the
output afterwards; `report` says which is which. A keyword the backend cannot enforce never sinks the whole
schema there: it is loosened (`loosen`: look-around, overlapping `patternProperties`, unsupplied remote
`$ref`s, out-of-range bounds; a schema the rewrites made too large is renormalised with `$defs` and without
negation rewrites) and listed as post-checked. Object keys are generated in schema order (`schema_order`).
Non-default backends give no exactness guarantee, so they require `strict=False`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from recipe.constraints.backend import Backend, CompiledConstraint, NothingHandle
from recipe.constraints.kinds import ConstraintError, check_backend, check_kind
from recipe.constraints.limits import (
    DEFAULT_LIMITS,
    ByteBoundedCache,
    Limits,
    check_depth,
    check_size,
    run_with_timeout,
)
from recipe.constraints.loosen import after_error, explain
from recipe.constraints.normalize import Normalized, normalize
from recipe.constraints.report import SchemaReport, build_report
from recipe.constraints.vocabulary import Vocabulary, vocabulary_of
from recipe.tokenizer import Tokenizer

DEFAULT_BACKEND: dict[str, str] = {
    "json_schema": "llguidance",
    "json_object": "llguidance",
    "regex": "llguidance",
    "tool_call": "llguidance",
    "grammar": "llguidance",
}
DEFAULT_TIMEOUT_S = DEFAULT_LIMITS.timeout_s
CACHE = ByteBoundedCache(DEFAULT_LIMITS.cache_bytes)


def get_backend(name: str) -> Backend:
    check_backend(name)
    if name == "llguidance":
        from recipe.constraints.llguidance_backend import LLGuidanceBackend

        return LLGuidanceBackend()
    if name == "xgrammar":
        from recipe.constraints.xgrammar_backend import XGrammarBackend

        return XGrammarBackend()
    from recipe.constraints.outlines_backend import OutlinesBackend

    return OutlinesBackend()


def parse_schema(spec: Any, limits: Limits = DEFAULT_LIMITS) -> Any:
    """A JSON Schema from a dict/bool or its JSON text, with size and depth limits applied."""
    if isinstance(spec, bytes | str):
        text = spec.decode("utf-8", "replace") if isinstance(spec, bytes) else spec
        check_size(text, limits)
        try:
            spec = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ConstraintError(f"schema is not valid JSON: {exc}") from None
    else:
        try:
            check_size(json.dumps(spec), limits)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ConstraintError(f"schema is not JSON-serialisable: {exc}") from None
    if not isinstance(spec, dict | bool):
        raise ConstraintError("a JSON Schema must be an object or a boolean")
    check_depth(spec, limits)
    return spec


def _strict_probe(schema: Any, vocab: Vocabulary) -> tuple[Any, str | None]:
    """Compile strictly with llguidance: (handle, None) or (None, its refusal message)."""
    backend = get_backend("llguidance")
    try:
        return backend.compile("json_schema", schema, vocab, lenient=False), None
    except ConstraintError as exc:
        return None, exc.message.removeprefix("llguidance: ")


def schema_report(schema: Any, tokenizer: Tokenizer, *, eos_token_ids: tuple[int, ...] | None = None,
                  resources: dict[str, Any] | None = None) -> SchemaReport:
    """The keyword report alone (what `recipe validate` prints)."""
    schema = parse_schema(schema)
    norm = normalize(schema, resources)
    if norm.schema is False:
        return build_report(schema, norm, None)
    _, err = _strict_probe(norm.schema, vocabulary_of(tokenizer, eos_token_ids))
    return build_report(schema, norm, err)


def _compile_lark(spec: Any, norm: Any, vocab: Vocabulary, strict: bool, t0: float,
                  builder: Any) -> CompiledConstraint | None:
    """A schema part no backend masks natively, written as a Lark grammar by `builder` (top-level
    `contains` as counted arrays, overlapping `patternProperties` as disjoint key regions); exact when the
    grammar's embedded schemas compile strictly."""
    backend = get_backend("llguidance")
    err = ""
    for lenient in (False, True):
        if lenient and strict:
            return None
        lark = builder(norm.schema, lenient=lenient)
        if lark is None:
            return None
        try:
            handle = backend.compile("grammar", lark, vocab, lenient=lenient)
        except ConstraintError as exc:
            err = exc.message
            continue
        report = build_report(spec, norm, None if not lenient else err)
        return CompiledConstraint("json_schema", "llguidance", handle, vocab, spec, report, spec,
                                  time.perf_counter() - t0, {"lark": lark})
    return None


_MAX_LOOSENING_STEPS = 16
# refusals a schema without Recipe's negation rewrites may avoid (they grow it, and a negated branch may put
# sibling keywords beside a recursive reference)
_RENORMALISE_ON = ("too large", "too big", "circular references with sibling keys")


def _compile_loosening(backend: Backend, norm: Normalized, vocab: Vocabulary, spec: Any,
                       resources: dict[str, Any] | None) -> tuple[Any, Normalized]:
    """Non-strict compile: while the backend refuses, loosen what its message names (`loosen.after_error`)
    or, for a schema the negation rewrites made too large, renormalise without them; the loosened keywords
    join `norm.loosened` (post-checked). Raises the backend's error when nothing is left to loosen."""
    ladder = [True, False]  # first every `$ref` as a `$defs` entry, then also no negation rewrites
    for _ in range(_MAX_LOOSENING_STEPS):
        try:
            return backend.compile("json_schema", norm.schema, vocab, lenient=True), norm
        except ConstraintError as exc:
            step = after_error(norm.schema, exc.message)
            if step is not None:
                norm.schema = step[0]
                norm.loosened |= step[1]
            elif any(m in exc.message for m in _RENORMALISE_ON) and norm.negations:
                norm = normalize(spec, resources, negations=ladder[0], all_defs=True)
                ladder = ladder[1:] or [False]
            else:
                raise ConstraintError(explain(exc.message)) from None
    return backend.compile("json_schema", norm.schema, vocab, lenient=True), norm


def _compile(kind: str, spec: Any, vocab: Vocabulary, backend_name: str, strict: bool, tokenizer: Tokenizer,
             options: dict[str, Any]) -> CompiledConstraint:
    t0 = time.perf_counter()
    backend = get_backend(backend_name)
    if kind not in backend.kinds:
        raise ConstraintError(f"backend {backend_name} does not support constraint kind {kind!r}")
    if kind == "json_schema":
        norm = normalize(spec, options.get("resources"))
        if norm.schema is False:
            if not options.get("allow_unsatisfiable"):
                raise ConstraintError("schema admits no value, so nothing can be generated")
            empty = build_report(spec, norm, None)
            return CompiledConstraint(kind, backend_name, NothingHandle(), vocab, spec, empty, spec,
                                      time.perf_counter() - t0)
        from recipe.constraints.contains_grammar import contains_lark
        from recipe.constraints.pattern_properties_grammar import pattern_properties_lark

        if backend_name == "llguidance":
            counted = _compile_lark(spec, norm, vocab, strict, t0, contains_lark)
            if counted is not None:
                return counted
        handle, err = _strict_probe(norm.schema, vocab) if backend_name == "llguidance" or strict else (None, None)
        if err is not None and backend_name == "llguidance" and "disjoint" in err:
            regions = _compile_lark(spec, norm, vocab, strict, t0, pattern_properties_lark)
            if regions is not None:
                return regions
        report = build_report(spec, norm, err) if (backend_name == "llguidance" or strict) else None
        if strict and report is not None and not report.enforced_exactly:
            raise ConstraintError(report.refusal())
        if handle is None or backend_name != "llguidance":
            handle, norm = _compile_loosening(backend, norm, vocab, spec, options.get("resources"))
            report = build_report(spec, norm, err) if report is not None else None
        # the schema the handle was compiled from: `string_masks` reads which strings are free in it
        from recipe.constraints.string_masks import worth_tracking

        return CompiledConstraint(kind, backend_name, handle, vocab, spec, report, spec,
                                  time.perf_counter() - t0, {"resources": options.get("resources"),
                                                             "string_schema": norm.schema,
                                                             "track_strings": worth_tracking(norm.schema, vocab)})
    if kind == "tool_call":
        from recipe.constraints.tool_call import tool_call_lark

        tools = spec.get("tools") if isinstance(spec, dict) else spec
        lark = tool_call_lark(
            tools, tokenizer, fmt=options.get("format") or (spec.get("format") if isinstance(spec, dict) else None),
            required=bool(spec.get("required")) if isinstance(spec, dict) else False,
            thinking=bool(spec.get("thinking")) if isinstance(spec, dict) else False,
            lenient=not strict,
            single=bool(spec.get("single")) if isinstance(spec, dict) else False,
        )
        handle = backend.compile(kind, lark, vocab, lenient=not strict)
        return CompiledConstraint(kind, backend_name, handle, vocab, spec, None, None, time.perf_counter() - t0,
                                  {"lark": lark})
    if kind == "regex" and not isinstance(spec, str):
        raise ConstraintError("a regex constraint needs the pattern as a string")
    if kind == "grammar" and not isinstance(spec, str):
        raise ConstraintError("a grammar constraint needs the grammar text as a string")
    handle = backend.compile(kind, spec, vocab, lenient=not strict)
    return CompiledConstraint(kind, backend_name, handle, vocab, spec, None, None, time.perf_counter() - t0)


def compile_constraint(
    kind: str,
    spec: Any,
    tokenizer: Tokenizer,
    *,
    backend: str | None = None,
    strict: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    eos_token_ids: tuple[int, ...] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    cache: ByteBoundedCache | None = CACHE,
    resources: dict[str, Any] | None = None,
    allow_unsatisfiable: bool = False,
) -> CompiledConstraint:
    """Compile a constraint over `tokenizer`'s vocabulary; raises `ConstraintError` with a clear message.

    spec: json_schema — dict/bool or JSON text; regex — pattern; json_object — ignored; grammar — Lark
    (llguidance) or EBNF (xgrammar); tool_call — Chat-style tool list, or `{"tools": [...],
    "required": bool, "format": "dsml_v4"|"dsml_v41"|"chatml", "thinking": bool, "single": bool}`.
    `eos_token_ids`: stop ids allowed exactly when the matcher can terminate (default: the tokenizer's EOS).
    Compilation runs off the caller's thread and fails after `timeout_s`; results are cached (bounded in bytes).
    `resources`: URI → schema documents `$ref` may use (never fetched). `allow_unsatisfiable`: a schema that
    admits no value compiles to a constraint allowing no token (instance checking) instead of an error.
    """
    check_kind(kind)
    name = backend or DEFAULT_BACKEND[kind]
    check_backend(name)
    if strict and name != "llguidance" and kind == "json_schema":
        raise ConstraintError(f"backend {name} cannot guarantee exact enforcement; pass strict=False")
    if kind == "json_schema":
        spec = parse_schema(spec, limits)
    elif kind in ("regex", "grammar"):
        if isinstance(spec, str):
            check_size(spec, limits)
    elif kind == "tool_call":
        if isinstance(spec, str):
            check_size(spec, limits)
        try:
            check_depth(spec if not isinstance(spec, str) else json.loads(spec), limits)
            check_size(json.dumps(spec), limits)
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            raise ConstraintError(f"tool list is not valid JSON: {exc}") from None
    vocab = vocabulary_of(tokenizer, eos_token_ids)
    key = None
    if cache is not None:
        try:
            key = (id(vocab), name, kind, strict, allow_unsatisfiable,
                   json.dumps([spec, resources], sort_keys=True))
        except (TypeError, ValueError):
            key = None
        hit = cache.get(key) if key is not None else None
        if hit is not None:
            return hit  # type: ignore[no-any-return]
    compiled = run_with_timeout(
        lambda: _compile(kind, spec, vocab, name, strict, tokenizer,
                         {"resources": resources, "allow_unsatisfiable": allow_unsatisfiable}),
        timeout_s, f"the {kind} constraint",
    )
    if cache is not None and key is not None:
        cache.put(key, compiled, compiled.size_bytes + len(key[-1]))
    return compiled
