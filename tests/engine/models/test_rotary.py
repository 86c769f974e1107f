"""RoPE frequencies equal `transformers`' for every supported rope_type; unsupported kinds fail clearly."""

from __future__ import annotations

import pytest
import torch
from recipe.engine.layers.rotary import RopeConfigError, RotaryEmbedding, rope_inv_freq

CASES = [
    {"rope_type": "default", "rope_theta": 100000.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
     "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 2048},
]


@pytest.mark.parametrize("params", CASES, ids=lambda p: p["rope_type"] + str(p.get("factor", "")))
def test_inverse_frequencies_equal_transformers(params: dict) -> None:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=512, num_attention_heads=8, max_position_embeddings=16384,
                      rope_parameters=dict(params))
    got, got_scale = rope_inv_freq(dict(params), 64, 16384)
    if params["rope_type"] == "default":
        expected = 1.0 / (params["rope_theta"] ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
        scale = 1.0
    else:
        expected, scale = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu")
    torch.testing.assert_close(got, expected, atol=0, rtol=1e-6)
    assert got_scale == pytest.approx(scale)


def test_unknown_rope_type_is_a_clear_error() -> None:
    with pytest.raises(RopeConfigError, match="unsupported rope_type 'dynamic'"):
        rope_inv_freq({"rope_type": "dynamic", "rope_theta": 1e4}, 64, 4096)


def test_half_split_and_interleaved_rotations_agree_up_to_layout() -> None:
    """Rotating (x[2i], x[2i+1]) and emitting evens-then-odds equals rotating the de-interleaved vector."""
    inv_freq, _ = rope_inv_freq({"rope_type": "default", "rope_theta": 1e4}, 8, 64)
    x = torch.randn(5, 2, 8)
    pos = torch.arange(5) * 7
    inter, half = RotaryEmbedding(inv_freq, 1.0, True), RotaryEmbedding(inv_freq, 1.0, False)
    cos, sin = inter.cos_sin(pos, torch.float32)
    deinterleaved = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
    torch.testing.assert_close(inter.rotate(x, cos, sin), half.rotate(deinterleaved, cos, sin))
