"""What `bench/engine.py` compares Recipe against, and the machine's honest read bandwidth.

- llama.cpp through `llama-cpp-python`, installed by the benchmark itself into the running interpreter's
  environment (`python -m pip install`), never a dependency of Recipe; the build time is reported once.
- Read bandwidth: a reduction over a 1 GiB tensor reads every byte once and writes nothing, so bytes / time
  is read bandwidth (a copy would count its writes too, and inflate the roofline fraction about 2x).
"""

from __future__ import annotations

import importlib
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
import torch

LLAMA_CPP_VERSION = "0.3.36"


class ReadBandwidth:
    """Bytes read per second by `sum` over a 1 GiB fp32 tensor: the better of the tensor where torch allocates it
    and in transparent huge pages (where the engine keeps its weights by default). The two tensors are made
    once, so that the rate can be taken beside every timed round (this machine's rate drifts between ~40 and
    ~75 GB/s over minutes)."""

    def __init__(self) -> None:
        from recipe.engine.huge_pages import move_weights_to_huge_pages

        self.plain = torch.ones(1 << 28)
        holder = torch.nn.Module()
        holder.register_buffer("t", torch.ones(1 << 28))
        self.huge = holder.t if move_weights_to_huge_pages(holder) else None
        holder.t = torch.empty(0)

    def measure(self, repeats: int = 5) -> float:
        rates = []
        for t in (self.plain, self.huge):
            if t is None:
                continue
            t.sum()
            times = []
            for _ in range(repeats):
                s = time.perf_counter()
                t.sum()
                times.append(time.perf_counter() - s)
            rates.append(t.numel() * 4 / statistics.median(times))
        return max(rates)


def ensure_llama_cpp() -> tuple[Any, float | None]:
    """(the `llama_cpp` module, seconds spent installing it now, or None if it was already installed)."""
    try:
        return importlib.import_module("llama_cpp"), None
    except ImportError:
        pass
    print(f"installing llama-cpp-python=={LLAMA_CPP_VERSION} (builds from source; minutes)...", flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"llama-cpp-python=={LLAMA_CPP_VERSION}"], check=True)
    took = time.perf_counter() - start
    importlib.invalidate_caches()
    return importlib.import_module("llama_cpp"), took


class LlamaCpp:
    """One llama.cpp context on a GGUF file; greedy decoding from token ids."""

    def __init__(self, path: str, threads: int, n_ctx: int = 4096) -> None:
        llama_cpp, self.install_seconds = ensure_llama_cpp()
        self.llm = llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx,
                                   n_batch=512, verbose=False)

    def decode(self, prompt: list[int], new_tokens: int) -> tuple[float, float]:
        """(seconds to the first new token, seconds per later token) for a greedy continuation (its tokens are kept in
        `self.tokens`)."""
        self.llm.reset()
        start = time.perf_counter()
        self.llm.eval(prompt)
        times = []
        for _ in range(new_tokens):
            # the last position's logits (llama-cpp-python fills `scores` only with logits_all=True)
            tok = int(np.argmax(np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.llm.n_vocab(),))))
            times.append(time.perf_counter())
            self.llm.eval([tok])
        self.tokens = [int(t) for t in self.llm.input_ids[len(prompt):self.llm.n_tokens]]
        first = times[0] - start
        return first, (times[-1] - times[0]) / max(1, new_tokens - 1)

    def prefill(self, prompt: list[int]) -> float:
        """Seconds to evaluate `prompt` from an empty context."""
        self.llm.reset()
        start = time.perf_counter()
        self.llm.eval(prompt)
        return time.perf_counter() - start
