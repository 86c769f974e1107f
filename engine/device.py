"""The one place for device-specific calls: the rest of the engine names a device only as a string.

Supported: "cpu", "cuda[:i]", "npu[:i]" (Ascend through `torch_npu`), or any torch device whose backend
module follows the `torch.cuda` shape (`synchronize`, `mem_get_info`).
"""

from __future__ import annotations

import os

import torch


def resolve(device: str) -> torch.device:
    """Parse and check a device string; raise `ValueError` with a clear message when it is unusable."""
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"unknown device {device!r}: {exc}") from None
    if dev.type == "npu":
        try:
            import torch_npu  # noqa: F401  (registers the npu backend)
        except ImportError:
            raise ValueError("device 'npu' needs the torch_npu package") from None
    if dev.type != "cpu":
        backend = getattr(torch, dev.type, None)
        if backend is None or not backend.is_available():
            raise ValueError(f"device {device!r} is not available on this machine")
    return dev


def synchronize(device: torch.device) -> None:
    """Wait for all queued work on `device` (a no-op on the CPU)."""
    if device.type != "cpu":
        getattr(torch, device.type).synchronize(device)


def free_memory_bytes(device: torch.device) -> int:
    """Memory available for new allocations on `device`: free device memory, or available host memory."""
    if device.type != "cpu":
        free, _total = getattr(torch, device.type).mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def set_num_threads(num_threads: int | None) -> int:
    """Set torch's intra-op CPU threads (default: every core this process may use); return the count."""
    n = num_threads or len(os.sched_getaffinity(0))
    if n < 1:
        raise ValueError(f"num_threads must be >= 1, got {n}")
    torch.set_num_threads(n)
    return n


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """Map "float32" / "fp32" / "bfloat16" / "bf16" / "float16" / "fp16" / "float64" to a torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    table = {
        "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
        "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
        "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
        "float64": torch.float64, "fp64": torch.float64, "double": torch.float64,
    }
    try:
        return table[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(table)}") from None
