"""One sequence's KV blocks of every cache kind as named arrays (what a transport carries), and back.

For each kind of the manager, the payload holds the blocks at table positions `complete_blocks(kind, skip)`
up to `filled_blocks(kind, num_tokens)` that hold KV (window blocks already `RELEASED` are left out): under
`"{key}/{kind}"` their bytes (uint8, in `BlockStore.read`'s layout) and under `"{key}/{kind}/at"` their
table positions. Loading writes them at the same positions of the receiving sequence's tables and releases
the positions the sender had released, so no block without KV is ever registered in the prefix cache.
"""

from __future__ import annotations

import numpy as np
import torch
from recipe.engine.block_manager import BlockManager
from recipe.engine.kv_cache import BlockStore
from recipe.engine.layers.v4_kv import RELEASED
from recipe.engine.sequence import Sequence


def save_blocks(store: BlockStore, manager: BlockManager, seq: Sequence, skip_tokens: int, num_tokens: int,
                key: str) -> dict[str, np.ndarray]:
    """Copies of `seq`'s blocks holding KV of tokens [skip_tokens, num_tokens), every kind (see the module)."""
    tables = manager.tables_for(seq)
    arrays: dict[str, np.ndarray] = {}
    for kind in manager.kinds:
        table = tables[kind]
        end = manager.filled_blocks(kind, num_tokens)
        assert len(table) >= end, (kind, len(table), end)
        at = [i for i in range(manager.complete_blocks(kind, skip_tokens), end) if table[i] != RELEASED]
        data = store.read(kind, [table[i] for i in at]).contiguous().cpu()
        arrays[f"{key}/{kind}"] = data.reshape(-1).view(torch.uint8).numpy()
        arrays[f"{key}/{kind}/at"] = np.asarray(at, dtype=np.int64)
    return arrays


def load_blocks(store: BlockStore, manager: BlockManager, seq: Sequence, arrays: dict[str, np.ndarray],
                skip_tokens: int, num_tokens: int, key: str) -> dict[str, list[int]]:
    """Write a `save_blocks` payload into `seq`'s blocks (allocated for at least `num_tokens` tokens); release
    the window positions it skipped. Returns, per kind, the table positions released."""
    tables = manager.tables_for(seq)
    released: dict[str, list[int]] = {}
    for kind in manager.kinds:
        table = tables[kind]
        at = arrays[f"{key}/{kind}/at"].tolist()
        first, end = manager.complete_blocks(kind, skip_tokens), manager.filled_blocks(kind, num_tokens)
        assert all(first <= i < end for i in at) and len(table) >= end, (kind, at, first, end)
        sent = set(at)
        released[kind] = [i for i in range(first, end) if i not in sent and table[i] != RELEASED]
        manager.release_slid(seq, kind, released[kind])
        if not at:
            continue
        probe = store.read(kind, [])  # [layers, planes, 0, ...]: the kind's block layout and dtype
        shape = (probe.shape[0], probe.shape[1], len(at), *probe.shape[3:])
        data = torch.from_numpy(np.ascontiguousarray(arrays[f"{key}/{kind}"])).view(probe.dtype).reshape(shape)
        store.write(kind, [table[i] for i in at], data)
    return released
