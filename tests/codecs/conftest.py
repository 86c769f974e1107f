"""Codec test fixtures; makes `codec_oracle` (reference adapters, generators) importable from the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import deepseek_recipe as dr
import pytest

from recipe.tokenizer import deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tokenizer():
    return load_deepseek_v4_tokenizer()


@pytest.fixture(scope="session")
def ref_v4_encoder():
    return dr.DeepseekV4Encoding().with_tokenizer(dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path())))


@pytest.fixture(scope="session")
def ref_v41_encoder():
    return dr.DeepseekV41Encoding().with_tokenizer(dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path())))
