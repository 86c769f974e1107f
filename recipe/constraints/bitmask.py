"""Packed token bitmasks: bit `i % 32` of int32 word `i // 32` set means token `i` is allowed.

numpy only; `to_torch` / `apply_to_logits_torch` work when torch is importable. No Python loop runs over
the vocabulary: unpacking goes through `np.unpackbits` on a little-endian byte view.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


def words_for(vocab_size: int) -> int:
    """Number of int32 words for a vocabulary of `vocab_size` ids."""
    return (vocab_size + 31) // 32


def allocate(vocab_size: int, batch: int | None = None) -> np.ndarray:
    """A zeroed int32 mask of shape (words,) or (batch, words)."""
    shape = (words_for(vocab_size),) if batch is None else (batch, words_for(vocab_size))
    return np.zeros(shape, dtype=np.int32)


def is_allowed(mask: np.ndarray, token_id: int) -> bool:
    return bool((int(mask[token_id >> 5]) >> (token_id & 31)) & 1)


def set_allowed(mask: np.ndarray, token_ids: Iterable[int], allowed: bool = True) -> None:
    """Set or clear the bits of a few ids (EOS handling), in place."""
    view = mask.view(np.uint32)
    for t in token_ids:
        bit = np.uint32(1 << (t & 31))
        if allowed:
            view[t >> 5] |= bit
        else:
            view[t >> 5] &= ~bit


def to_bool(mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Unpack to a bool array of length `vocab_size` (True = allowed)."""
    bits = np.unpackbits(np.ascontiguousarray(mask, dtype="<i4").view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


def allowed_ids(mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """The allowed ids, ascending."""
    return np.flatnonzero(to_bool(mask, vocab_size))


def count_allowed(mask: np.ndarray, vocab_size: int) -> int:
    return int(to_bool(mask, vocab_size).sum())


def apply_to_logits(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Set disallowed logits to -inf in place (numpy, last axis = vocabulary); returns `logits`."""
    allowed = to_bool(mask, logits.shape[-1])
    logits[..., ~allowed] = -np.inf
    return logits


def to_torch(mask: np.ndarray) -> Any:
    """A torch int32 tensor sharing memory with `mask` (needs torch)."""
    import torch

    return torch.from_numpy(mask)


def apply_to_logits_torch(logits: Any, mask: Any) -> Any:
    """Set disallowed logits to -inf in place; `logits` (..., V) float tensor, `mask` int32 words
    (numpy or torch, same leading shape). Vectorised: shifts and ands, no Python loop."""
    import torch

    m = mask if isinstance(mask, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(mask))
    m = m.to(device=logits.device)
    vocab = logits.shape[-1]
    shifts = torch.arange(32, device=logits.device, dtype=torch.int32)
    bits = (m.unsqueeze(-1) >> shifts) & 1
    allowed = bits.reshape(*m.shape[:-1], -1)[..., :vocab].bool()
    logits.masked_fill_(~allowed, float("-inf"))
    return logits
