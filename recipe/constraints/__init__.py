"""Structured output: JSON Schema, regex, JSON-object, tool-call and grammar constraints as token masks.

`compile_constraint(kind, spec, tokenizer, ...)` → `CompiledConstraint`; `.matcher()` → `Matcher`
(`fill_bitmask`, `accept`, `rollback`, `can_terminate`, `is_terminated`, `text`). Masks are packed int32
bitmasks (`recipe.constraints.bitmask`); the EOS ids are allowed exactly when the matcher can terminate.
No torch needed (xgrammar, an optional backend, imports it lazily).
"""

from __future__ import annotations

from typing import Any

from recipe.constraints.backend import CompiledConstraint, Matcher
from recipe.constraints.compiler import DEFAULT_BACKEND, compile_constraint, schema_report
from recipe.constraints.kinds import ConstraintError
from recipe.constraints.report import SchemaReport, validate_output
from recipe.tokenizer import Tokenizer

__all__ = [
    "DEFAULT_BACKEND",
    "CompiledConstraint",
    "ConstraintError",
    "Matcher",
    "SchemaReport",
    "compile_constraint",
    "from_output_constraint",
    "schema_report",
    "validate_output",
]


def from_output_constraint(
    constraint: Any,
    tokenizer: Tokenizer,
    *,
    strict: bool = False,
    tool_format: str | None = None,
    thinking: bool = False,
    single_tool_call: bool = False,
    **kwargs: Any,
) -> CompiledConstraint:
    """Compile conversion's `OutputConstraint` (kinds json / regex / tool_call / tool_call_required).

    `("json", "")` is a JSON object (response_format json_object). The conversion does not carry the
    request's `strict` flag, so by default a schema is enforced as far as the mask can and the output is
    validated afterwards (`strict=True` refuses schemas the mask cannot enforce exactly).
    `tool_format` defaults to DSML (V4 spelling) when the tokenizer has the `｜DSML｜` token, else ChatML;
    pass "dsml_v41" for V4.1 prompts. `thinking`: the output may begin with reasoning closed by `</think>`
    (tool-call kinds only). `single_tool_call`: at most one call, after which only the end may follow.
    """
    kind = getattr(constraint, "kind", None)
    schema = getattr(constraint, "schema", None)
    if kind == "json":
        if not schema:
            return compile_constraint("json_object", None, tokenizer, strict=strict, **kwargs)
        return compile_constraint("json_schema", schema, tokenizer, strict=strict, **kwargs)
    if kind == "regex":
        return compile_constraint("regex", schema, tokenizer, strict=strict, **kwargs)
    if kind in ("tool_call", "tool_call_required"):
        spec = {"tools": schema, "required": kind == "tool_call_required", "format": tool_format,
                "thinking": thinking, "single": single_tool_call}
        return compile_constraint("tool_call", spec, tokenizer, strict=strict, **kwargs)
    raise ConstraintError(f"unknown output constraint kind {kind!r}")
