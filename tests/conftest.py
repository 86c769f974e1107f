"""Suite-wide options: which stream modules the tests run (recipe.compiled_stream).

The choice applies at the first import of `recipe.stream`, so no conftest may import it at module level
(conftests load before `pytest_configure`); tests/stream/test_compiled_stream.py checks the choice held.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--pure-stream", action="store_true",
                     help="run recipe.stream's pure-Python modules even where the compiled ones are built")


def pytest_configure(config: pytest.Config) -> None:
    from recipe import compiled_stream

    if config.getoption("--pure-stream"):
        compiled_stream.use_compiled(False)
    elif not hasattr(config, "workerinput"):
        # the controller (or the only process) builds them once per change of their sources (~30 s), so
        # the tests run what `recipe serve` runs; xdist workers then load that build
        compiled_stream.build()
