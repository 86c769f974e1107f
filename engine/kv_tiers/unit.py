"""One stored KV block ("unit"), the same bytes in the host tier's slots and in the directory tier's files.

Layout: a fixed header, the block's token ids (int64), then the block's KV bytes. The header names the
namespace (model fingerprint, dtype, block size, layout) and the chained block hash, so a unit can never be
read back as another model's or another block's KV; an XXH3-64 checksum over namespace, hash, tokens and KV
catches truncation and bit rot (zlib's CRC-32 ran at a fifth of XXH3's rate here and capped restore
bandwidth). `decode` raises `CorruptUnit` for anything that does not check out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import xxhash

MAGIC = b"RCPKVU02"
HEADER = struct.Struct("<8s16s16sII16sdQQ")  # magic, namespace, hash, tokens, flags, class, created, kv_len, sum
HEADER_SIZE = HEADER.size
CLASS_FIELD = 16


class CorruptUnit(Exception):
    """The bytes are not a complete, intact unit of the expected namespace and hash."""


@dataclass(frozen=True)
class UnitHeader:
    namespace: bytes
    block_hash: bytes
    num_tokens: int
    retention_class: str
    created: float
    kv_len: int
    crc: int

    @property
    def size(self) -> int:
        return unit_size(self.num_tokens, self.kv_len)


def unit_size(num_tokens: int, kv_len: int) -> int:
    return HEADER_SIZE + 8 * num_tokens + kv_len


def checksum(namespace: bytes, block_hash: bytes, tokens: np.ndarray, kv: np.ndarray) -> int:
    h = xxhash.xxh3_64()
    h.update(namespace)
    h.update(block_hash)
    h.update(np.ascontiguousarray(tokens).data.cast("B"))
    h.update(np.ascontiguousarray(kv).data.cast("B"))
    return int(h.intdigest())


def encode_into(out: np.ndarray, namespace: bytes, block_hash: bytes, tokens: np.ndarray, kv: np.ndarray,
                retention_class: str, created: float) -> int:
    """Write the unit into the uint8 buffer `out` (at least `unit_size` bytes); returns its size."""
    tok = np.ascontiguousarray(tokens, dtype=np.int64)
    flat = kv.reshape(-1).view(np.uint8)
    cls = retention_class.encode()
    if len(cls) > CLASS_FIELD:
        raise ValueError(f"retention class name {retention_class!r} is longer than {CLASS_FIELD} bytes")
    crc = checksum(namespace, block_hash, tok, flat)
    HEADER.pack_into(out.data, 0, MAGIC, namespace, block_hash, len(tok), 0, cls, created, flat.nbytes, crc)
    t0 = HEADER_SIZE
    t1 = t0 + 8 * len(tok)
    out[t0:t1] = tok.view(np.uint8)
    out[t1:t1 + flat.nbytes] = flat
    return t1 + flat.nbytes


def encode(namespace: bytes, block_hash: bytes, tokens: np.ndarray, kv: np.ndarray, retention_class: str,
           created: float) -> np.ndarray:
    out = np.empty(unit_size(len(tokens), kv.nbytes), dtype=np.uint8)
    encode_into(out, namespace, block_hash, tokens, kv, retention_class, created)
    return out


def read_header(buf: bytes | np.ndarray | memoryview) -> UnitHeader:
    if isinstance(buf, np.ndarray):
        buf = buf.data
    if len(buf) < HEADER_SIZE:
        raise CorruptUnit(f"truncated header ({len(buf)} bytes)")
    magic, ns, h, n, _flags, cls, created, kv_len, crc = HEADER.unpack_from(buf, 0)
    if magic != MAGIC or _flags != 0:
        raise CorruptUnit("bad magic or flags")
    return UnitHeader(ns, h, n, cls.rstrip(b"\0").decode(errors="replace"), created, kv_len, crc)


def decode(buf: np.ndarray, namespace: bytes, block_hash: bytes, kv_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, KV bytes) views into `buf`, after checking namespace, hash, sizes and checksum."""
    head = read_header(buf)
    if head.namespace != namespace:
        raise CorruptUnit("namespace differs")
    if head.block_hash != block_hash:
        raise CorruptUnit("block hash differs")
    if head.kv_len != kv_len:
        raise CorruptUnit(f"KV length {head.kv_len} != {kv_len}")
    if len(buf) != head.size:
        raise CorruptUnit(f"size {len(buf)} != {head.size}")
    t1 = HEADER_SIZE + 8 * head.num_tokens
    tokens = buf[HEADER_SIZE:t1].view(np.int64)
    kv = buf[t1:t1 + kv_len]
    if checksum(namespace, block_hash, tokens, kv) != head.crc:
        raise CorruptUnit("checksum mismatch")
    return tokens, kv
