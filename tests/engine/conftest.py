"""Engine tests share the tiny paged model in `tiny_paged_model.py` (importable from this folder); the tiny
checkpoints (`llama_checkpoint`, `deepseek_checkpoint`) are suite-wide, in tests/conftest.py, since the cluster
tests load them too."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
