"""Configuration mistakes get clear errors naming the problem, before any model is loaded."""

from __future__ import annotations

import pytest
import torch
from recipe.engine import LLM, EngineConfig, SamplingParams
from recipe.engine import device as devices
from tiny_paged_model import TinyInfo, TinyPagedLM


def test_unknown_option_is_named() -> None:
    with pytest.raises(TypeError, match=r"unknown engine config option\(s\) \['max_batch'\]"):
        EngineConfig.from_kwargs("smollm2", max_batch=3)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"block_size": 12}, "block_size must be a power of two"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens must be >= 1"),
    ({"kv_cache_fraction": 1.5}, "kv_cache_fraction must be in"),
])
def test_bad_values_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig.from_kwargs(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"temperature": -1}, "temperature must be >= 0"),
    ({"top_p": 0.0}, "top_p must be in"),
    ({"top_k": 0}, "top_k must be -1"),
    ({"max_tokens": 0}, "max_tokens must be >= 1"),
    ({"logprobs": 21}, "logprobs must be in"),
    ({"n": 0}, "n must be >= 1"),
    ({"constraint": object()}, "constraint must be a compiled constraint"),
])
def test_bad_sampling_params_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_devices_and_dtypes_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        devices.resolve("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not available on this machine"):
            devices.resolve("cuda")
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        devices.parse_dtype("fp8")
    assert devices.parse_dtype("bf16") is torch.bfloat16


def test_kv_pool_is_sized_from_the_byte_budget() -> None:
    model = TinyPagedLM()
    per_block = model.kv_bytes_per_block(8, torch.float64)
    llm = LLM((model, TinyInfo()), dtype="float64", block_size=8, kv_cache_bytes=10 * per_block + 5, num_threads=1)
    assert llm.engine.block_manager.num_blocks == 10
    assert llm.engine.max_model_len == 80  # a sequence can never outgrow the pool
    with pytest.raises(ValueError, match="holds no block"):
        LLM((TinyPagedLM(), TinyInfo()), dtype="float64", kv_cache_bytes=1, num_threads=1)
    llm.shutdown()


def test_every_field_says_in_one_line_what_it_does() -> None:
    """Each field's help (the `recipe serve --help` text and docs/flags.md) is one line, and names are unique
    across the groups, so a flat name and a flag name say their group."""
    import dataclasses

    from recipe.engine.config import GROUPS, group_of

    names = [f.name for cls in GROUPS.values() for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names))
    for group, cls in GROUPS.items():
        for f in dataclasses.fields(cls):
            text = f.metadata.get("help", "")
            assert text and "\n" not in text and len(text) <= 240, f.name
            assert group_of(f.name) == group
