"""A fast reader of GGUF files (format v2/v3): metadata as plain Python values, tensors as numpy views.

The `gguf` package's reader builds numpy views for each of the ~100k vocabulary strings and takes seconds;
this one parses the header with `struct` in one pass and memory-maps the tensor data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from recipe.engine.models.weights import CheckpointError

_MAGIC = b"GGUF"
# GGUF value types: uint8, int8, uint16, int16, uint32, int32, float32, bool, string, array, uint64, int64, float64
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # outermost dimension first (numpy / torch order)
    qtype: GGMLQuantizationType
    data: np.ndarray  # raw bytes (uint8) or typed values, as stored
    offset: int = 0  # where `data` starts in the file (a loader may read it instead of touching the mapping)


class _Cursor:
    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def scalar(self, fmt: str) -> Any:
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.scalar("<Q")
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.scalar("<I"), self.scalar("<Q")
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                size = struct.calcsize(fmt)
                out = list(struct.unpack_from(f"<{count}{fmt[1]}", self.buf, self.pos))
                self.pos += size * count
                return out
            return [self.value(etype) for _ in range(count)]
        if vtype not in _SCALARS:
            raise CheckpointError(f"GGUF metadata value type {vtype} is unknown")
        return self.scalar(_SCALARS[vtype])


def read_gguf_file(path: str | Path) -> tuple[dict[str, Any], list[GGUFTensor]]:
    """(metadata, tensors) of a GGUF file; tensor data is memory-mapped, not read (nor resident until touched)."""
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(memoryview(mm))  # type: ignore[arg-type]
    try:
        if bytes(cur.buf[:4]) != _MAGIC:
            raise CheckpointError(f"{path} is not a GGUF file")
        cur.pos = 4
        version = cur.scalar("<I")
        if version not in (2, 3):
            raise CheckpointError(f"GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            meta[key] = cur.value(cur.scalar("<I"))
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            dims = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
            infos.append((name, dims, GGMLQuantizationType(cur.scalar("<I")), cur.scalar("<Q")))
    except (struct.error, ValueError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupt GGUF header ({exc})") from None
    align = int(meta.get("general.alignment", 32))
    start = (cur.pos + align - 1) // align * align
    tensors = []
    for name, dims, qtype, offset in infos:
        block, type_size = GGML_QUANT_SIZES[qtype]
        n = int(np.prod(dims))
        nbytes = n // block * type_size
        begin = start + offset
        if begin + nbytes > mm.shape[0]:
            raise CheckpointError(f"{path}: tensor {name!r} runs past the end of the file")
        tensors.append(GGUFTensor(name, tuple(reversed(dims)), qtype, mm[begin : begin + nbytes], begin))
    return meta, tensors
