"""A 7B Q4_K_M serves in under 6 GiB resident (issue 43): a synthetic GGUF with DeepSeek-R1-Distill-Qwen-7B's shapes
and Q4_K_M's layout (`bench/gguf_memory.py`, 4.36 GiB), loaded by `LLM` generating a few tokens and by `recipe
serve` answering one chat request, each in its own process; peak resident (VmHWM) of each.

The KV pool is 512 MiB (4,681 tokens of this model's fp32 KV; llama-server's default context is 4,096): the
engine's default pool on the CPU is 2 GiB, allocated zeroed and so resident, which alone puts the total past 6 GiB.
Writes ~4.4 GiB under the temporary directory; slow (minutes)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30
KV_BYTES = 512 << 20


@pytest.mark.slow
def test_a_7b_q4_k_m_serves_in_under_6_gib(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from gguf_memory import SHAPES, measure_engine, measure_serve, write_synthetic_gguf

    assert shutil.disk_usage(tmp_path).free > 5 * GIB, f"{tmp_path} needs 5 GiB free for the synthetic file"
    path = tmp_path / "r1-qwen-7b-Q4_K_M.gguf"
    try:
        size = write_synthetic_gguf(path, SHAPES["r1-qwen-7b"])
        assert 4.2 * GIB < size < 4.5 * GIB  # the real file's size (4.68 GB)
        engine = measure_engine(path, tokens=2, threads=None, kv_cache_bytes=KV_BYTES)
        assert len(engine["tokens"]) == 2 and "own quantised blocks" in engine["path"]
        assert engine["VmHWM"] < 6 * GIB, engine
        # what the weights cost: the peak over the imports and the KV pool stays about the file's size
        assert engine["VmHWM"] - engine["start_rss"] - KV_BYTES < 1.1 * size, engine
        serve = measure_serve(path, threads=None, kv_cache_bytes=KV_BYTES)
        assert serve["completion_tokens"] and serve["VmHWM"] < 6 * GIB, serve
    finally:
        path.unlink(missing_ok=True)
