"""Cap the number of glibc malloc arenas, so that freed request memory is not scattered over many heaps.

glibc gives each new thread that allocates its own arena, up to 8 per core. The server's threads (the
event loop, `asyncio.to_thread` workers for large bodies and constraint compiles, the compile pool) each
churn through request-sized allocations in their own arena, and the memory they free stays held there in
holes that `malloc_trim` cannot hand back. Measured in-process (echo backend, `bench/fuzz.py`'s bodies,
requests 1,000 to 4,000, RSS read after `gc.collect()` and `malloc_trim`): +49 to +85 MiB with glibc's
default (malloc's free-but-held memory 188 -> 253 MiB while what was in use grew 12 MiB), +12 MiB with one
or two arenas, the rest being the constraint caches. `bench/fuzz.py --per-api 10000` (a real server, with
the byte-bounded constraint memo): +12.5% RSS over 30,000 requests with two arenas, +5.4% with one (the
default; +55.8% before either change). One arena serialises malloc across threads.

`limit_malloc_arenas(n)` calls `mallopt(M_ARENA_MAX, n)`; it must run before the threads it should cover
first allocate (threads already bound to an arena keep it). 0 leaves glibc's default. Elsewhere than glibc
it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def _glibc_mallopt() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim"):  # not glibc: no arenas to cap
        return None
    return getattr(libc, "mallopt", None)


def limit_malloc_arenas(n: int) -> bool:
    """Allow at most `n` malloc arenas from now on (0: glibc's default); True when the allocator took it."""
    if n < 0:
        raise ValueError("the malloc arena limit must be 0 (glibc's default) or positive")
    mallopt = _glibc_mallopt() if n else None
    return bool(mallopt(M_ARENA_MAX, n)) if mallopt is not None else False
