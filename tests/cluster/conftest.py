"""Disaggregation tests: `disagg_helpers` (importable from this folder, also by spawned worker processes), and
the tiny DeepSeek-V4 checkpoint writer of `tests/engine/models/v4_checkpoints.py` (hand-off of every cache kind)."""

from __future__ import annotations

import sys
from pathlib import Path

for _dir in (Path(__file__).parent, Path(__file__).parents[1] / "engine" / "models"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))
