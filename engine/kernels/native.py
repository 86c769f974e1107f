"""Builds `cpu_kernels.c`, `llama_decode.c` and `gguf_kernels.c` into a shared library on first use and calls it through ctypes on tensor data.

The library is compiled once per source and compiler flags into a cache directory (`~/.cache/recipe/kernels`), with `-O3 -march=native -fopenmp`, linked to the OpenMP runtime torch
already loaded, so `torch.set_num_threads` sets the threads of both. Without a C compiler (or when the
build fails) `library()` is None and every caller keeps its pure-torch path: same results, slower.
`scripts/setup.sh` builds it at install time (`python -m recipe.engine.kernels.native`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

SOURCES = [Path(__file__).with_name(name) for name in ("cpu_kernels.c", "llama_decode.c", "gguf_kernels.c")]
HEADER = Path(__file__).with_name("cpu_kernels.h")
# -ffp-contract=off: each written multiply and add is rounded as written (no fused multiply-add the source did
# not ask for), so element-wise code (RoPE, residuals) computes what torch computes.
FLAGS = ["-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-shared", "-fPIC", "-std=c11"]

_I64, _F32, _PTR = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
SIGNATURES: dict[str, list[type]] = {
    "q8_0_matmul": [_PTR, _I64, _I64, _PTR, _PTR, _I64, _PTR],
    "q4_1_matmul": [_PTR, _I64, _I64, _PTR, _PTR, _PTR, _I64, _PTR],
    "gguf_matmul": [_PTR, _I64, _I64, _PTR, _I64, _I64, _PTR, _I64, _I64],
    "rms_norm": [_PTR, _PTR, _I64, _I64, _F32, _PTR],
    "paged_decode_attention": [_PTR, _PTR, _PTR, _PTR, _I64, _PTR, _I64, _I64, _I64, _I64, _I64, _I64, _I64,
                               _I64, _I64, _I64, _F32, _PTR],
    "llama_decode": [_PTR, _I64, _PTR, _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _I64, _PTR],
    "fused_linear": [_PTR, _PTR, _I64, _PTR],
    "draft_head_step": [_PTR, _I64, _PTR, _PTR, _PTR, _PTR, _PTR],
}
RESTYPES: dict[str, type | None] = {"llama_decode": ctypes.c_int, "fused_linear": ctypes.c_int,
                                    "draft_head_step": ctypes.c_int}


def cache_dir() -> Path:
    return Path.home() / ".cache" / "recipe" / "kernels"


def _library_path() -> Path:
    text = b"".join(p.read_bytes() for p in (*SOURCES, HEADER))
    key = hashlib.sha256(text + " ".join(FLAGS).encode() + sys.platform.encode()).hexdigest()[:16]
    return cache_dir() / f"cpu_kernels-{key}.so"


def build() -> Path | None:
    """Compile the library if it is not in the cache yet; its path, or None without a working compiler."""
    path = _library_path()
    if path.exists():
        return path
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or sys.platform != "linux":
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            out = Path(tmp) / path.name
            done = subprocess.run([compiler, *FLAGS, *map(str, SOURCES), "-o", str(out), "-lm"], capture_output=True)
            if done.returncode != 0:
                return None
            os.replace(out, path)  # atomic: concurrent builders never load a half-written file
    except OSError:
        return None
    return path


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The loaded kernels (ctypes releases the GIL during each call), or None where they cannot be built."""
    path = build()
    if path is None:
        return None
    lib = ctypes.CDLL(str(path))
    for name, args in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = RESTYPES.get(name)
    return lib


def ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


if __name__ == "__main__":
    built = build()
    print(f"recipe native CPU kernels: {built if built else 'not built (no C compiler); pure-torch paths in use'}")
