"""Codex's free-form `apply_patch` tool end to end: Codex 0.169.0 declares it as a Responses `custom` tool with
its Lark grammar for model families that take it (here `-m gpt-5.5`, the name the echo server is served under),
the server constrains the call's input to that grammar and returns a `custom_tool_call`, and Codex applies
the patch. The echo backend speaks the DSML call its user types, so the prompt is the model's call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from client_servers import ECHO_MODEL, RecipeServer, serving
from test_codex import assert_completed, codex, configure, items

CODEX_PATCH_MODEL = "gpt-5.5"  # a model family Codex sends the free-form apply_patch tool to
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from recipe\n*** End Patch\n"
CALL = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="apply_patch">\n'
        f'<｜DSML｜parameter name="input" string="true">{PATCH}</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")


@pytest.fixture(scope="module")
def patch_server() -> Iterator[RecipeServer]:
    yield from serving("--backend", "echo", "--model", ECHO_MODEL, "--served-model-name", CODEX_PATCH_MODEL)


def test_codex_applies_a_patch_sent_as_a_custom_tool_call(patch_server: RecipeServer, tmp_path: Path) -> None:
    configure(tmp_path, patch_server, CODEX_PATCH_MODEL)
    events = codex(tmp_path, "-s", "workspace-write", CALL)
    assert_completed(events)
    changes = items(events, "file_change")
    assert changes and changes[0]["status"] == "completed", events
    assert (tmp_path / "hello.txt").read_text() == "hello from recipe\n"
