"""`recipe encode`: request bodies → prompt, special ranges and token ids, one JSON object per request.

    recipe encode --api chat request.json
    recipe encode --api messages --jsonl requests.jsonl
    cat body.json | recipe encode --api responses -

Per request it prints `{"model_version", "prompt", "special_ranges", "token_ids"}` (code-point
ranges; `token_ids` null when `--no-ids`, or when the tokenizer lacks a special token the prompt needs,
with `token_ids_error` saying which), or `{"error": {"status", "body"}}` with the body in the called
API's error shape. A single request exits 1 when it fails; `--jsonl` exits 0 even when some lines fail.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from recipe.codec import APIS, ConversionOptions, convert, render
from recipe.errors import RequestError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "encode",
        help="convert request bodies to DeepSeek prompts and token ids",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--api", choices=APIS, required=True, help="the API the bodies are written for")
    p.add_argument("--jsonl", action="store_true", help="one request body per line")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json path (default: the DeepSeek V4 tokenizer)")
    p.add_argument("--no-ids", action="store_true", help="skip tokenization (token_ids: null)")
    p.add_argument("file", nargs="?", default="-", help="input file, or - for standard input (default)")
    p.set_defaults(func=run)


def encode_one(api: str, body: bytes | str, tokenizer: Any, options: ConversionOptions) -> tuple[dict[str, Any], bool]:
    """The output object for one body, and whether it converted."""
    try:
        req = convert(api, body, options)
    except RequestError as exc:
        return {"error": {"status": exc.status, "body": exc.body(api)}}, False
    rendered = render(req)
    out: dict[str, Any] = {
        "model_version": req.model_version.value,
        "prompt": rendered.prompt,
        "special_ranges": [list(r) for r in rendered.special_ranges],
        "token_ids": None,
    }
    if tokenizer is not None:
        from recipe.encoding import encode_rendered
        from recipe.tokenizer import MissingSpecialTokenError

        try:
            out["token_ids"] = encode_rendered(rendered, tokenizer)
        except MissingSpecialTokenError as exc:
            out["token_ids_error"] = str(exc)
    return out, True


def _load_tokenizer(path: str | None) -> Any:
    from recipe.tokenizer import Tokenizer, load_deepseek_v4_tokenizer

    return Tokenizer.from_file(path) if path else load_deepseek_v4_tokenizer()


def run(args: argparse.Namespace) -> int:
    try:
        if args.file == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.file, "rb") as f:
                data = f.read()
    except OSError as exc:
        print(f"recipe encode: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        tokenizer = None if args.no_ids else _load_tokenizer(args.tokenizer)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"recipe encode: cannot load tokenizer {args.tokenizer}: {exc}", file=sys.stderr)
        return 2
    options = ConversionOptions()
    out = sys.stdout.buffer
    if not args.jsonl:
        result, ok = encode_one(args.api, data, tokenizer, options)
        out.write(orjson.dumps(result) + b"\n")
        out.flush()
        return 0 if ok else 1
    for line in data.splitlines():
        if not line.strip():
            continue
        result, _ = encode_one(args.api, line, tokenizer, options)
        out.write(orjson.dumps(result) + b"\n")
    out.flush()
    return 0
