"""`engine/kv_cache.py` owns the KV tensors: layers hold views of them, and `read`/`write` move whole blocks of
every layer, so a sequence whose blocks were copied elsewhere decodes exactly as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from model_driver import PagedDriver
from recipe.engine.kv_cache import CacheSpec, KVCache
from recipe.engine.models.registry import load_model

PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11]


@settings(max_examples=40, deadline=None)
@given(
    planes=st.integers(1, 2), layers=st.integers(1, 3), blocks=st.integers(1, 9), block_size=st.sampled_from([1, 2, 4]),
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=2), data=st.data(),
)
def test_write_then_read_returns_the_data_and_touches_no_other_block(planes, layers, blocks, block_size, shape, data):
    spec = CacheSpec("k", layers, planes, tuple(shape))
    cache = KVCache([spec, CacheSpec("other", 1, 1, (2,))], blocks, block_size, torch.float32, "cpu")
    cache.tensors["k"].normal_()
    before = cache.tensors["k"].clone()
    other = cache.tensors["other"].clone()
    ids = data.draw(st.lists(st.integers(0, blocks - 1), unique=True, max_size=blocks))
    payload = torch.randn(layers, planes, len(ids), block_size, *shape)
    cache.write("k", ids, payload)
    assert torch.equal(cache.read("k", ids), payload)
    untouched = [b for b in range(blocks) if b not in ids]
    assert torch.equal(cache.tensors["k"][:, :, untouched], before[:, :, untouched])
    assert torch.equal(cache.tensors["other"], other)
    assert spec.bytes_per_block(block_size, torch.float32) * blocks == cache.tensors["k"].numel() * 4


def test_layer_views_alias_the_owned_tensor(tiny_llama_dir: Path) -> None:
    model, _ = load_model(tiny_llama_dir)
    cache = model.allocate_kv_cache(6, 4, torch.float32, "cpu")
    assert list(cache.tensors) == ["full"] and cache.tensors["full"].shape == (3, 2, 6, 4, 2, 16)
    attn = model.layers[1].self_attn.attn
    assert attn.k_cache.data_ptr() == cache.tensors["full"][1, 0].data_ptr()
    assert attn.v_cache.data_ptr() == cache.tensors["full"][1, 1].data_ptr()
    assert model.kv_bytes_per_block(4, torch.float32) == cache.nbytes // 6


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_deepseek_dir"])
def test_blocks_copied_through_read_write_decode_as_the_originals(fixture: str, request) -> None:
    model, _ = load_model(request.getfixturevalue(fixture))
    drv = PagedDriver(model, num_seqs=2, max_len=32)  # sequence 0 owns blocks 0..7, sequence 1 blocks 8..15
    drv.step([(0, PROMPT)])
    expected = drv.step([(0, [77])])[0]
    drv.lens[0] -= 1  # undo the decode, then move sequence 0's blocks into sequence 1's and decode there
    cache = model.kv_cache
    kind = next(iter(cache.tensors))
    src, dst = drv.tables[0], drv.tables[1]
    cache.write(kind, dst, cache.read(kind, src))
    drv.tables[1], drv.lens[1] = dst, drv.lens[0]
    got = drv.step([(1, [77])])[0]
    assert torch.equal(got, expected)
