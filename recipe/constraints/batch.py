"""Batched mask filling for an engine step: one bitmask row per sequence, llguidance rows in parallel.

`fill_bitmasks(matchers, out)` equals calling `matchers[i].fill_bitmask(out[i])` for every i (a test proves
it); llguidance matchers are computed together on llguidance's thread pool (the GIL is released), others
(and llguidance matchers whose mask is a copy: start state, inside a free string; or near their budget's end,
`closing`) one by one. `None` entries leave their row all-ones (an unconstrained sequence in the same batch).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from recipe.constraints.backend import Matcher
from recipe.constraints.kinds import ConstraintError


@functools.cache
def _executor():  # type: ignore[no-untyped-def]
    import llguidance as llg

    return llg.LLExecutor()


def fill_bitmasks(matchers: Sequence[Matcher | None], out: np.ndarray) -> None:
    """Fill row i of `out` (int32, shape (B, W), C-contiguous) for `matchers[i]`."""
    if out.dtype != np.int32 or out.ndim != 2 or out.shape[0] < len(matchers) or not out.flags["C_CONTIGUOUS"]:
        raise ConstraintError("batch bitmask must be a C-contiguous 2-D int32 array with a row per matcher")
    from recipe.constraints.llguidance_backend import _Matcher as LLBackendMatcher

    parallel = []
    words = 0
    for i, m in enumerate(matchers):
        if m is None:
            out[i] = -1
            continue
        bm = m.backend_matcher
        if (isinstance(bm, LLBackendMatcher) and not bm.copies_mask and not m.is_terminated() and not m.closing_due()
                and out.shape[1] == m._words):
            parallel.append((bm.raw, i))
            words = m._words
        else:
            m.fill_bitmask(out[i])
    if parallel:
        _executor().unsafe_compute_mask_ptr(parallel, out.ctypes.data, words * 4, out.shape[0])
        for _, i in parallel:
            m = matchers[i]
            assert m is not None
            m.backend_matcher.remember(out[i])  # type: ignore[attr-defined]
            m.fix_eos_bits(out[i])
