"""Fixtures of the real-client tests: the echo and demo-model servers, one of each per test process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from client_servers import ECHO_MODEL, RecipeServer, serving


@pytest.fixture(scope="session")
def echo_server() -> Iterator[RecipeServer]:
    """The echo backend in the DeepSeek V4 prompt format: long agent prompts answered at once."""
    yield from serving("--backend", "echo", "--model", ECHO_MODEL)


@pytest.fixture(scope="session")
def demo_server() -> Iterator[RecipeServer]:
    """The embedded demo model (SmolLM2-135M-Instruct, ChatML); 256 output tokens at most a request, since
    Claude Code asks for up to the context (at temperature 1, a 135M model may use it all)."""
    yield from serving("--max-num-seqs", "4", "--max-output-tokens", "256")

