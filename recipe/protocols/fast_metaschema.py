"""A compiled pre-check of schema documents against the draft 2020-12 metaschema.

`definitely_valid(schema)` answers True only when the pure-Python check in `tools._schema_problem`
(Python `jsonschema` with its format checker) would find no metaschema violation; False means
"not known": the caller then runs the Python check, which also words the message. So this module
decides nothing on its own and never changes an error message; it only skips the slow validator
for the common case of a valid schema.

Why it is sound:
- the compiled validator (`jsonschema-rs`, Rust) checks the same metaschema, without formats;
  its keyword semantics are at least as strict as Python's on JSON input (e.g. `1.0` as an integer
  is accepted by both; `$`-anchored patterns reject a trailing newline in Rust only);
- the one format Python's checker enforces on this metaschema is `regex` (on `pattern` values and
  `patternProperties` keys; `uri`/`uri-reference` need packages Recipe does not install). It is
  over-approximated here: every string under a `pattern` key and every key of a
  `patternProperties` object anywhere in the document must compile with `re`, as Python's
  checker requires. A string in a non-schema position that fails only sends the schema to the
  Python check.
`tests/codec/test_fast_metaschema.py` checks the implication on widely drawn schemas.
Without `jsonschema-rs` installed, every answer is False (the Python check runs).
"""

from __future__ import annotations

import re
import warnings
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _compiled() -> Any:
    try:
        import jsonschema_rs
    except ImportError:  # pragma: no cover - jsonschema-rs is a runtime dependency
        return None
    from jsonschema import Draft202012Validator

    return jsonschema_rs.Draft202012Validator(Draft202012Validator.META_SCHEMA, validate_formats=False)


REGEX_MEMO_MAX_CHARS = 4096  # longer patterns are checked each time: the memo stays under 4,096 x 4 KiB


def _regex_ok(pattern: str) -> bool:
    return _compiles(pattern) if len(pattern) > REGEX_MEMO_MAX_CHARS else _memo_compiles(pattern)


def _compiles(pattern: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern)
        except re.error:
            return False
    return True


_memo_compiles = lru_cache(maxsize=4096)(_compiles)


def _regexes_ok(node: Any) -> bool:
    """Every `pattern` string and `patternProperties` key anywhere in `node` compiles with `re`."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            p = n.get("pattern")
            if isinstance(p, str) and not _regex_ok(p):
                return False
            pp = n.get("patternProperties")
            if isinstance(pp, dict) and not all(_regex_ok(k) for k in pp):
                return False
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return True


def definitely_valid(schema: Any, schema_json: str | None = None) -> bool:
    """True only if the Python metaschema check (formats included) finds nothing; False: unknown.

    `schema_json`: the schema as serialised by `tools.compact_json` (keys written out plainly), when the
    caller has it; without the text `"pattern` in it there is no regex to check.
    """
    validator = _compiled()
    if validator is None:
        return False
    try:
        if not validator.is_valid(schema):
            return False
    except Exception:  # values the compiled side cannot take (integers beyond 64 bits...)
        return False
    if schema_json is not None and '"pattern' not in schema_json:
        return True
    return _regexes_ok(schema)
