"""KV connector tests: `handoff_pair` (importable from this folder), the reference runner and picklable test
constraint of `../../cluster/disagg_helpers.py`, and the tiny DeepSeek-V4 checkpoint writer of
`../models/v4_checkpoints.py` (hand-off of every cache kind)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).parent
for _dir in (_HERE, _HERE.parents[1] / "cluster", _HERE.parent / "models"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))
