"""Shared fixtures: the DeepSeek V4 tokenizer, the vendored JSON-Schema-Test-Suite, a GPT-2-style tokenizer, and
the batched-versus-single mask walk of the reuse tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recipe.tokenizer import Tokenizer, load_deepseek_v4_tokenizer

SUITE = Path(__file__).resolve().parents[1] / "data" / "json-schema-test-suite"


@pytest.fixture(scope="session")
def tok() -> Tokenizer:
    return load_deepseek_v4_tokenizer()


@pytest.fixture(scope="session")
def suite_dir() -> Path:
    return SUITE / "draft2020-12"


@pytest.fixture(scope="session")
def remotes() -> dict[str, Any]:
    from recipe.constraints.suite import load_remotes

    return load_remotes(SUITE / "remotes")


def gpt2_style_tokenizer(added: tuple[str, ...] = ("<|endoftext|>", "<|im_end|>")) -> Tokenizer:
    """A small byte-level BPE tokenizer (256 byte tokens + a few merges), built in memory."""
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, pre_tokenizers

    from recipe.detokenizer import byte_level_alphabet as _byte_decoder

    alphabet = sorted(_byte_decoder(), key=lambda c: _byte_decoder()[c])
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = [("Ġ", "t"), ("h", "e"), ('"', ":"), ("t", "r"), ("u", "e"), ("tr", "ue"), ("{", '"')]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    hf = HF(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(list(added))
    return Tokenizer(hf.to_str(), name="gpt2-style")


@pytest.fixture(scope="session")
def small_tok() -> Tokenizer:
    return gpt2_style_tokenizer()


def dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _batched_masks_equal(on: list[Any], off: list[Any], id_lists: list[list[int]], words: int) -> None:
    """Walk every document's ids: the batched fill of the `on` matchers equals each `off` matcher's own fill at
    every step (both accept each id)."""
    import numpy as np

    from recipe.constraints.batch import fill_bitmasks

    out = np.zeros((len(on), words), np.int32)
    ref = np.zeros(words, np.int32)
    for step in range(max(map(len, id_lists))):
        fill_bitmasks(on, out)
        for i, ids in enumerate(id_lists):
            off[i].fill_bitmask(ref)
            assert np.array_equal(out[i], ref), (i, step)
            if step < len(ids):
                assert on[i].accept(ids[step]) and off[i].accept(ids[step])


@pytest.fixture(scope="session")
def batched_masks_equal() -> Any:
    """`_batched_masks_equal(on, off, id_lists, words)`."""
    return _batched_masks_equal
