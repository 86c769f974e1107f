"""Speculative decoding tests share `spec_helpers.py` (importable from this folder)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """The test thread's own torch work (oracle drafters, exact distributions) on one thread: the tiny
    model's ops are far too small to share, and on a loaded machine extra threads only wait."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
