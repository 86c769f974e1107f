"""`recipe validate --schema FILE [OUTPUTS.jsonl]`: the keyword report, then each output's validity.

The report says which keywords the token mask enforces exactly, which are checked after generation and
which are unsupported. Each OUTPUTS line is a JSON string holding the generated text, or any other JSON
value (validated as is). Output: one JSON line for the report, then `{"index", "valid", "errors"}` per line.
Exit 0 when every output is valid, 1 when one is not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("validate", help="report how a JSON Schema is enforced; validate outputs")
    p.add_argument("--schema", type=Path, required=True, help="JSON Schema file")
    p.add_argument("outputs", type=Path, nargs="?", help="JSONL: one output per line")
    p.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(f"recipe validate: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from recipe.constraints import ConstraintError, schema_report
    from recipe.constraints.report import validate_output, validate_value
    from recipe.tokenizer import load_deepseek_v4_tokenizer

    try:
        text = args.schema.read_text(encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot read {args.schema}: {exc.strerror}")
    try:
        report = schema_report(text, load_deepseek_v4_tokenizer())
    except ConstraintError as exc:
        return _fail(exc.message)
    schema = orjson.loads(text)
    out = sys.stdout.buffer
    out.write(orjson.dumps({"report": report.to_dict()}) + b"\n")
    if args.outputs is None:
        return 0
    try:
        lines = args.outputs.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        return _fail(f"cannot read {args.outputs}: {exc.strerror}")
    all_valid = True
    index = 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            return _fail(f"{args.outputs}:{n}: not JSON: {exc}")
        errors = validate_output(schema, value) if isinstance(value, str) else validate_value(schema, value)
        all_valid &= not errors
        out.write(orjson.dumps({"index": index, "valid": not errors, "errors": errors}) + b"\n")
        index += 1
    out.flush()
    return 0 if all_valid else 1
