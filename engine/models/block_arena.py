"""Where the GGUF loader puts a file's quantised blocks: one anonymous mapping, filled tensor by tensor from the
file in the order the model reads them, so the weights take their file size in memory and are never copied.

The mapping is 2 MiB-aligned and advised MADV_HUGEPAGE where the platform allows, as `engine/huge_pages.py`
places loaded weights (the same page walks saved, without its copy). Every tensor handed out is a view of one
storage over the whole mapping, so `move_weights_to_huge_pages` leaves them where they are. Pages take memory
only once written; the mapping lives as long as any view of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
from typing import BinaryIO, cast

import torch
from recipe.engine.huge_pages import ALIGN, HUGE_PAGE


class BlockArena:
    """`nbytes` of views, handed out in order by `take` (each 64-byte aligned; `padded` sizes the whole)."""

    def __init__(self, nbytes: int) -> None:
        size = (-(-nbytes // HUGE_PAGE) + 1) * HUGE_PAGE  # one huge page of slack to align the start
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            with contextlib.suppress(OSError):  # ordinary pages then: the same values
                self._map.madvise(mmap.MADV_HUGEPAGE)
        start = -ctypes.addressof(ctypes.c_char.from_buffer(self._map)) % HUGE_PAGE
        self._all = torch.frombuffer(self._map, dtype=torch.uint8)  # one storage: views of it stay in place
        self._next, self._end = start, start + nbytes

    @staticmethod
    def padded(nbytes: int) -> int:
        return -(-nbytes // ALIGN) * ALIGN

    def take(self, nbytes: int) -> torch.Tensor:
        """The next `nbytes` (uint8, 1-D view)."""
        begin, self._next = self._next, self._next + self.padded(nbytes)
        assert self._next <= self._end, "BlockArena sized too small"
        return self._all[begin : begin + nbytes]


def read_into(f: BinaryIO, offset: int, out: torch.Tensor) -> None:
    """Fill the contiguous uint8 tensor `out` with the file's bytes from `offset` (no mapping of the file, so
    only `out` is resident: the page cache is not this process's memory)."""
    view = memoryview(cast(bytearray, out.numpy())).cast("B")  # numpy arrays are writable buffers
    f.seek(offset)
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])  # type: ignore[attr-defined]
        if not n:
            raise EOFError(f"file ends {len(view) - done} bytes short of a tensor at offset {offset}")
        done += n
