"""The checks every engine front makes on a request before it is queued."""

from __future__ import annotations

from recipe.engine.sampling_params import SamplingParams


def check_prompt(prompt_ids: list[int], params: SamplingParams, vocab_size: int, max_model_len: int) -> list[int]:
    """Return the prompt as a list of ids; ValueError/TypeError naming what is wrong with it or its params."""
    if not isinstance(params, SamplingParams):
        raise TypeError("params must be a SamplingParams")
    ids = list(prompt_ids)
    if not ids:
        raise ValueError("the prompt is empty")
    if not all(isinstance(t, int) and 0 <= t < vocab_size for t in ids):
        raise ValueError(f"prompt token ids must be ints in [0, {vocab_size})")
    if len(ids) >= max_model_len:
        raise ValueError(f"the prompt has {len(ids)} tokens; this engine holds at most {max_model_len} "
                         "per sequence (prompt + output)")
    return ids
