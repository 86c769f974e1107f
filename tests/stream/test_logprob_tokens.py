"""Logprob token strings equal the reference's for every vocabulary id (sampled token and alternatives).

A token whose bytes are not valid UTF-8 on their own (part of a character) is spelled with every byte
escaped, `"\\x20\\xc2"`, not only its invalid tail (issue 21, class 3); `bytes` are the raw bytes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from recipe.stream.logprobs import LogprobRenderer
from recipe.stream.updates import TokenLogprob


def _reference_entries(ids: list[int]) -> list[dict[str, Any]]:
    """The reference's `top_logprobs` entries for `ids`, as alternatives of one sampled token."""
    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path

    body = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    cr = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions())
    gen = dr.ChatCompletionRequest.chunk_generator(cr, "r", "m")
    proc = dr.StreamProcessor(gen, cr.parsing_options, dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path())))
    proc.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=1, prompt_cache_hit_tokens=0)))
    out = proc.push(dr.InferenceChunk.tokens([1234], [(-1.0, [(t, -0.5) for t in ids])]))
    proc.close()
    (chunk,) = [json.loads(item.to_json()) for item in out if json.loads(item.to_json())["choices"][0]["logprobs"]]
    entries: list[dict[str, Any]] = chunk["choices"][0]["logprobs"]["reasoning_content"][0]["top_logprobs"]
    return entries


def _check(ids: list[int], tokenizer: Any) -> None:
    ref = _reference_entries(ids)
    renderer = LogprobRenderer(tokenizer)
    (ours,) = renderer.entries([1234], [TokenLogprob(-1.0, [(t, -0.5) for t in ids])])
    mismatched = [(t, a, b) for t, a, b in zip(ids, ours["top_logprobs"], ref, strict=True) if a != b]
    assert not mismatched, mismatched[:5]


def _partial_character_ids(tokenizer: Any) -> list[int]:
    from recipe.detokenizer import byte_level_alphabet

    dec = byte_level_alphabet()
    out = []
    for t in range(tokenizer.full.get_vocab_size()):
        raw = tokenizer.id_to_token(t)
        if raw and t not in tokenizer.special_ids and all(c in dec for c in raw):
            try:
                bytes(dec[c] for c in raw).decode("utf-8")
            except UnicodeDecodeError:
                out.append(t)
    return out


def test_partial_character_and_sampled_tokens_are_spelled_as_the_reference_spells_them(v4_tokenizer: Any) -> None:
    partial = _partial_character_ids(v4_tokenizer)
    assert len(partial) > 1000
    _check(partial + list(range(0, v4_tokenizer.full.get_vocab_size(), 97)), v4_tokenizer)


@pytest.mark.slow
def test_every_vocabulary_token_is_spelled_as_the_reference_spells_it(v4_tokenizer: Any) -> None:
    _check(list(range(v4_tokenizer.full.get_vocab_size())), v4_tokenizer)


def test_partial_character_token_escapes_every_byte(v4_tokenizer: Any) -> None:
    renderer = LogprobRenderer(v4_tokenizer)
    (tid,) = [t for t in range(128000) if v4_tokenizer.id_to_token(t) == "\u0120\u00ea\u00b9"]  # bytes 20 ea b9
    assert renderer.token(tid) == ("\\x20\\xea\\xb9", [0x20, 0xEA, 0xB9])
