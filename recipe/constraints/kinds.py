"""Constraint kinds, the error every bad constraint raises, and the backend names."""

from __future__ import annotations

from typing import Literal, get_args

ConstraintKind = Literal["json_schema", "regex", "json_object", "tool_call", "grammar"]
BackendName = Literal["llguidance", "xgrammar", "outlines"]

KINDS: tuple[str, ...] = get_args(ConstraintKind)
BACKENDS: tuple[str, ...] = get_args(BackendName)


class ConstraintError(ValueError):
    """A constraint that cannot be compiled or used: bad spec, unsupported keyword, limit hit, timeout.

    `message` is meant for the API caller; it never contains a stack trace.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConstraintError(f"unknown constraint kind {kind!r}; expected one of {', '.join(KINDS)}")


def check_backend(name: str) -> None:
    if name not in BACKENDS:
        raise ConstraintError(f"unknown constraint backend {name!r}; expected one of {', '.join(BACKENDS)}")
