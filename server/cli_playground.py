"""`recipe playground`: the playground page alone, without loading any model (encode, decode, schemas)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("playground", help="serve the playground page without a model (no generation)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8001, help="port (default 8001)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from recipe.server.playground import standalone_app

    print(f"Recipe playground on http://{args.host}:{args.port}/playground (no model loaded)", flush=True)
    uvicorn.run(standalone_app(), host=args.host, port=args.port, log_level="warning")
    return 0
