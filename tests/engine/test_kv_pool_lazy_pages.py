"""The CPU KV pool costs memory as blocks are written, not at start (`engine.kv_cache._zeros`): a 1 GiB pool
adds little to the resident set until used, and it reads as zeros like `torch.zeros`."""

from __future__ import annotations

import subprocess
import sys

import torch
from recipe.engine.kv_cache import CacheSpec, KVCache

_PROBE = """
import torch
from recipe.engine.kv_cache import CacheSpec, KVCache
def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096
spec = CacheSpec(kind="attn", num_layers=4, planes=2, token_shape=(8, 128))
before = rss()
cache = KVCache([spec], num_blocks=2048, block_size=16, dtype=torch.float32, device="cpu")
idle = rss() - before
cache.tensors["attn"][:, :, :256].fill_(1.0)
used = rss() - before
print(idle, used)
"""


def test_pool_pages_are_resident_only_once_written() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120)
    idle, used = map(int, out.stdout.split())
    pool = 4 * 2 * 2048 * 16 * 8 * 128 * 4  # 1 GiB
    assert idle < pool // 16, idle
    assert used >= pool // 8 * 0.9, used  # an eighth of the blocks written: their pages are now resident


def test_pool_reads_as_zeros_in_every_dtype() -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int8):
        spec = CacheSpec(kind="k", num_layers=2, planes=1, token_shape=(3, 5), dtype=dtype)
        t = KVCache([spec], num_blocks=4, block_size=2, dtype=torch.float32, device="cpu").tensors["k"]
        assert t.dtype == dtype and t.shape == (2, 1, 4, 2, 3, 5)
        assert torch.equal(t, torch.zeros_like(t)) and t.is_contiguous()
