"""`recipe serve`'s flags are an interface other tools drive: the parser keeps every flag's spelling, dest,
default, type, choices, nargs and action as recorded in tests/server/serve_flags.json, and the recorded command
lines still give the same engine keyword arguments and server config."""

from __future__ import annotations

import json

import pytest
from parser_fingerprint import FIXTURE, fingerprint, meanings, serve_parser


def test_every_flag_is_as_recorded() -> None:
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))["flags"]
    now = fingerprint(serve_parser())
    assert sorted(now) == sorted(recorded), "flags added or removed"
    for flag, spec in recorded.items():
        assert now[flag] == spec, flag


def test_command_lines_mean_what_they_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECIPE_API_KEYS", raising=False)
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))["meanings"]
    now = meanings(serve_parser())
    assert sorted(now) == sorted(recorded)
    for line, meaning in recorded.items():
        assert now[line] == meaning, line
