"""The namespace of stored KV: which model, dtype, block size, KV layout and tokenizer produced it.

Two different models, or two dtypes of one, must never share a key, so the namespace digest covers the
weights themselves (SHA-256 of every parameter and buffer, hashed on a few threads: `hashlib` releases the
GIL), the model's configuration as the engine sees it, the KV dtype, the block size, the KV layout version
and the tokenizer.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

KV_LAYOUT_VERSION = 1  # bump when the bytes of a block's KV change meaning


def _tensor_digest(item: tuple[str, torch.Tensor]) -> bytes:
    name, t = item
    t = t.detach().contiguous().cpu()
    h = hashlib.sha256(f"{name}|{tuple(t.shape)}|{t.dtype}".encode())
    if t.numel():
        h.update(t.view(torch.uint8).reshape(-1).numpy().data)
    return h.digest()


def weights_fingerprint(model: Any, threads: int = 4) -> str:
    """SHA-256 over every named parameter and buffer (name, shape, dtype, bytes), in name order."""
    items = sorted({**dict(model.named_parameters()), **dict(model.named_buffers())}.items())
    with ThreadPoolExecutor(threads) as pool:
        digests = list(pool.map(_tensor_digest, items))
    return hashlib.sha256(b"".join(digests)).hexdigest()


def _describe(info: Any) -> str:
    fields = {}
    for name in ("architecture", "vocab_size", "num_layers", "hidden_size", "num_kv_heads", "head_dim",
                 "context_length", "eos_token_ids", "bos_token_id"):
        value = getattr(info, name, None)
        fields[name] = list(value) if isinstance(value, (tuple, frozenset, set)) else value
    return json.dumps(fields, sort_keys=True, default=str)


@dataclass(frozen=True)
class Namespace:
    weights: str
    config: str
    dtype: str
    block_size: int
    layout_version: int
    tokenizer: str

    @property
    def digest(self) -> bytes:
        """16 bytes naming this namespace (folder name of the directory tier, header field of every unit)."""
        text = json.dumps(self.__dict__, sort_keys=True)
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    @classmethod
    def of(cls, model: Any, info: Any, dtype: torch.dtype, block_size: int) -> Namespace:
        tokenizer = str(getattr(info, "tokenizer_json", "") or "")
        return cls(
            weights=weights_fingerprint(model), config=_describe(info), dtype=str(dtype), block_size=block_size,
            layout_version=KV_LAYOUT_VERSION, tokenizer=hashlib.sha256(tokenizer.encode()).hexdigest(),
        )
