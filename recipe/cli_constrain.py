"""`recipe constrain check`: compile a constraint over the DeepSeek V4 vocabulary and walk instances.

One JSON line per instance: `{"index": i, "accepted": bool}` (every id allowed by the mask and the matcher
can terminate after the last). A constraint that does not compile prints `{"compiled": false, "error": …}`
and exits 0. Bad input files exit 2 with a one-line message.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("constrain", help="check instances against a token-mask constraint")
    sub = p.add_subparsers(dest="constrain_command", required=True)
    c = sub.add_parser("check", help="walk each instance's tokens through the constraint's matcher")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--schema", type=Path, help="JSON Schema file")
    src.add_argument("--regex", help="regular expression (instances are strings)")
    src.add_argument("--json-object", action="store_true", help="any JSON object")
    c.add_argument("--backend", choices=["llguidance", "xgrammar", "outlines"], default=None)
    c.add_argument("--strict", action="store_true", help="refuse schemas the mask cannot enforce exactly")
    c.add_argument("--timeout", type=float, default=10.0, help="compile timeout in seconds")
    c.add_argument("instances", type=Path, help="JSONL file: one JSON value per line")
    c.set_defaults(func=run_check)


def _fail(msg: str) -> int:
    print(f"recipe constrain: {msg}", file=sys.stderr)
    return 2


def run_check(args: argparse.Namespace) -> int:
    from recipe.constraints import ConstraintError, compile_constraint
    from recipe.constraints.instance_check import check_value
    from recipe.tokenizer import load_deepseek_v4_tokenizer

    try:
        lines = args.instances.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        return _fail(f"cannot read {args.instances}: {exc.strerror}")
    values = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            values.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            return _fail(f"{args.instances}:{n}: not JSON: {exc}")
    if args.schema is not None:
        try:
            kind, spec = "json_schema", args.schema.read_text(encoding="utf-8")
        except OSError as exc:
            return _fail(f"cannot read {args.schema}: {exc.strerror}")
    elif args.regex is not None:
        kind, spec = "regex", args.regex
    else:
        kind, spec = "json_object", None
    tok = load_deepseek_v4_tokenizer()
    try:
        compiled = compile_constraint(kind, spec, tok, backend=args.backend, strict=args.strict,
                                      timeout_s=args.timeout)
    except ConstraintError as exc:
        sys.stdout.buffer.write(orjson.dumps({"compiled": False, "error": exc.message}) + b"\n")
        return 0
    out = sys.stdout.buffer
    for i, v in enumerate(values):
        if kind == "regex" and not isinstance(v, str):
            out.write(orjson.dumps({"index": i, "accepted": False, "error": "regex instances must be strings"}) + b"\n")
            continue
        w = check_value(compiled, v, tok)
        out.write(orjson.dumps({"index": i, "accepted": w.accepted}) + b"\n")
    out.flush()
    return 0
