"""`recipe serve`'s engine flags, generated from `EngineConfig`'s grouped fields (as vLLM's `EngineArgs` does).

Each field of `recipe.engine.config`'s groups is one flag, `--field-name` unless its metadata spells it
otherwise (`flag`; None: no flag), with the field's help. Its type follows the annotation: a bool is
`--x/--no-x` (or a lone `--no-x` switch), an int or float parses as one, a str is taken as written; `parse`
names another parser (`recipe.server.flag_types`), `choices`, `metavar` and `repeat` pass through. An unset
flag leaves its field to the engine's default (or to `serve_default`, the value `recipe serve` picks).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import textwrap
import types
from dataclasses import dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from recipe.engine.config import GROUPS
from recipe.server.flag_types import parser_named

TITLES = {"checkpoint": "model and weights", "kv": "KV cache and tiers",
          "session": "sliding-window session cache (DeepSeek-V4)", "scheduler": "scheduling",
          "spec": "speculative decoding", "parallel": "parallel and disaggregated serving", "kernels": "kernels"}
"""The `--help` title of each `EngineConfig` group (shown in `GROUPS`' order)."""


@dataclass(frozen=True)
class EngineFlag:
    """One engine config field as a `recipe serve` flag."""

    field: str
    group: str  # the `EngineConfig` attribute holding the field
    option: str  # the flag as spelled on the command line
    dest: str
    help: str
    default: Any  # what the engine runs with when the flag is unset
    unset: Any  # what argparse leaves in `dest` when the flag is not given; never passed on
    arguments: tuple[tuple[str, Any], ...]  # the rest of add_argument's keyword arguments


def _scalar(hint: Any) -> Any:
    """`int | None` -> int; a union of several types other than None -> None (the field names its parser)."""
    if get_origin(hint) in (Union, types.UnionType):
        kinds = [k for k in get_args(hint) if k is not type(None)]
        return kinds[0] if len(kinds) == 1 else None
    return hint


def _flag(group: str, f: dataclasses.Field[Any], hint: Any, option: str) -> EngineFlag:
    meta, kind = f.metadata, _scalar(hint)
    default = meta.get("serve_default", f.default)

    def flag(unset: Any, *arguments: tuple[str, Any]) -> EngineFlag:
        return EngineFlag(f.name, group, option, option[2:].replace("-", "_"), meta["help"], default, unset,
                          arguments)

    if kind is bool and option.startswith("--no-"):  # a lone switch turning a default-on field off
        return EngineFlag(f.name, group, option, f.name, meta["help"], default, True, (("action", "store_false"),))
    if kind is bool:
        return flag(None, ("action", argparse.BooleanOptionalAction), ("default", None))
    parse = parser_named(meta["parse"], kind) if "parse" in meta else (None if kind is str else kind)
    assert parse is not None or kind is str, f"{f.name}: a {hint} field needs a `parse` parser"
    unset: list[str] | None = [] if meta.get("repeat") else None
    return flag(unset, ("type", parse),
                ("default", default if "serve_default" in meta else unset),
                *((k, meta[k]) for k in ("metavar", "choices") if k in meta),
                *((("action", "append"),) if meta.get("repeat") else ()))


@cache
def engine_flags() -> tuple[EngineFlag, ...]:
    """Every engine flag, in `GROUPS`' order and each group's field order."""
    out = []
    for group, cls in GROUPS.items():
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            option = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
            if option is not None:
                out.append(_flag(group, f, hints[f.name], option))
    return tuple(out)


def add_engine_groups(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """One argument group per `EngineConfig` group, holding its flags; returned by group so that the server's
    own flags of the same concern can join them."""
    groups = {}
    for group, cls in GROUPS.items():
        about = " ".join(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].split())
        groups[group] = p.add_argument_group(TITLES[group], textwrap.fill(f"{about} (EngineConfig.{group})", 100))
    for flag in engine_flags():
        arguments: dict[str, Any] = {k: list(v) if isinstance(v, list) else v for k, v in flag.arguments}  # unshared
        groups[flag.group].add_argument(flag.option, dest=flag.dest, help=flag.help, **arguments)
    return groups


def engine_config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The engine keyword arguments (all but the model) the command line set; unset flags are left out, so
    each keeps the engine's default, except where `recipe serve` has its own."""
    out: dict[str, Any] = {}
    for flag in engine_flags():
        value = getattr(args, flag.dest, flag.unset)
        if flag.field != "model" and value is not None and value != flag.unset:
            out[flag.field] = list(value) if isinstance(value, list) else value
    return out
