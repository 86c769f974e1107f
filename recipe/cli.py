"""The `recipe` command: one sub-command per capability, each registered by its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

# sub-command name -> module defining `add_parser(subparsers)`, which adds the sub-command and sets
# `func(args) -> int` on it. A module that fails to import leaves its command listed as unavailable.
SUBCOMMANDS: dict[str, str] = {
    "encode": "recipe.cli_encode",
    "validate": "recipe.cli_validate",
    "constrain": "recipe.cli_constrain",
    "generate": "recipe.cli_generate",
    "serve": "recipe.server.cli_serve",
    "playground": "recipe.server.cli_playground",
    "conformance": "recipe.conformance.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recipe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in SUBCOMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # an optional extra is missing: the command says so when run
            p = sub.add_parser(name, help=f"(unavailable: {exc})")
            p.set_defaults(func=lambda _args, name=name, exc=exc: sys.exit(f"recipe {name}: unavailable: {exc}"))
            continue
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
