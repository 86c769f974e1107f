"""A `tokenizer.json` document rebuilt from a GGUF file's tokenizer metadata (GPT-2-style byte-level BPE)."""

from __future__ import annotations

import json
from typing import Any

from recipe.engine.models.weights import CheckpointError

# GGUF token types (llama.cpp): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
_SPECIAL_TYPES = (3, 4)
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
# llama.cpp's pre-tokenizer names that are GPT-2 byte-level, and whether digits are split one by one first.
_PRE_TOKENIZERS = {"default": False, "gpt2": False, "smollm": True, "starcoder": True}
# Those that split with their own regex first (as their tokenizer.json does), then byte-level without GPT-2's.
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
_LLAMA3 = _QWEN2.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
_SPLIT_REGEX = {"qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "llama-bpe": _LLAMA3}


def tokenizer_json_from_gguf(metadata: dict[str, Any]) -> str:
    """`metadata` holds `tokenizer.ggml.*` values: model, pre, tokens, token_type, merges.

    Raises `CheckpointError` for tokenizer kinds other than GPT-2-style byte-level BPE.
    """
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise CheckpointError(f"GGUF tokenizer model {kind!r} is not supported; only byte-level BPE ('gpt2')")
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in _PRE_TOKENIZERS and pre not in _SPLIT_REGEX:
        raise CheckpointError(f"GGUF pre-tokenizer {pre!r} is not supported; supported: "
                              f"{sorted([*_PRE_TOKENIZERS, *_SPLIT_REGEX])}")
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    types: list[int] = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges: list[str] = metadata.get("tokenizer.ggml.merges") or []
    pre_tokenizer: dict[str, Any] = _BYTE_LEVEL
    if pre in _SPLIT_REGEX:
        split = {"type": "Split", "pattern": {"Regex": _SPLIT_REGEX[pre]}, "behavior": "Isolated", "invert": False}
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [split, {**_BYTE_LEVEL, "use_regex": False}]}
    elif _PRE_TOKENIZERS[pre]:
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL]}
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, (t, ty) in enumerate(zip(tokens, types, strict=True)) if ty in _SPECIAL_TYPES
    ]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {**_BYTE_LEVEL, "trim_offsets": False},
        "decoder": _BYTE_LEVEL,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": merges,
        },
    }
    return json.dumps(doc, ensure_ascii=False)
