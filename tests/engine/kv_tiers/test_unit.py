"""A unit reads back exactly what was written, and nothing else reads back at all."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import NS, OTHER_NS
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.kv_tiers import unit

HASH = b"h" * 16


@settings(max_examples=60, deadline=None)
@given(tokens=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=64),
       kv=st.binary(min_size=0, max_size=4096), cls=st.sampled_from(["chat", "agent", "x" * 16]),
       created=st.floats(0, 1e10))
def test_round_trip(tokens: list[int], kv: bytes, cls: str, created: float) -> None:
    buf = unit.encode(NS, HASH, np.array(tokens, dtype=np.int64), np.frombuffer(kv, dtype=np.uint8), cls, created)
    head = unit.read_header(buf)
    assert (head.retention_class, head.created, head.num_tokens) == (cls, created, len(tokens))
    got_tokens, got_kv = unit.decode(buf, NS, HASH, len(kv))
    assert got_tokens.tolist() == tokens and got_kv.tobytes() == kv


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_flipped_byte_or_truncation_is_detected(data: st.DataObject) -> None:
    kv = np.frombuffer(data.draw(st.binary(min_size=1, max_size=512)), dtype=np.uint8)
    buf = unit.encode(NS, HASH, np.arange(4, dtype=np.int64), kv, "chat", 1.0)
    if data.draw(st.booleans()):
        bad = buf[: data.draw(st.integers(0, len(buf) - 1))]
    else:
        bad = buf.copy()
        at = data.draw(st.integers(0, len(buf) - 1))
        # the class name and creation time are metadata, not KV: the checksum does not cover them
        if unit.HEADER_SIZE - 40 <= at < unit.HEADER_SIZE - 16:
            at = unit.HEADER_SIZE + at % 8
        bad[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(unit.CorruptUnit):
        unit.decode(bad, NS, HASH, len(kv))


def test_other_namespace_or_hash_never_reads_back() -> None:
    buf = unit.encode(NS, HASH, np.arange(4, dtype=np.int64), np.zeros(8, np.uint8), "chat", 0.0)
    with pytest.raises(unit.CorruptUnit, match="namespace"):
        unit.decode(buf, OTHER_NS, HASH, 8)
    with pytest.raises(unit.CorruptUnit, match="hash"):
        unit.decode(buf, NS, b"g" * 16, 8)
    with pytest.raises(unit.CorruptUnit, match="KV length"):
        unit.decode(buf, NS, HASH, 16)
