"""The start-up line's count of linears left dense where block weights were asked for (`linear_census`)."""

from __future__ import annotations

import torch
from recipe.engine.layers.block_quant_linear import Q8_0Linear
from recipe.engine.linear_census import census_note, linear_census
from torch import nn


def test_mixed_model_is_named() -> None:
    model = nn.Sequential(Q8_0Linear(torch.randn(64, 64)), nn.Linear(64, 64), nn.Linear(64, 32))
    assert linear_census(model) == {"blocks": 1, "dense": 2}
    assert census_note(model) == "; 2 of 3 linears dense (their file format has no native kernel)"


def test_all_blocks_or_all_dense_says_nothing() -> None:
    assert census_note(nn.Sequential(Q8_0Linear(torch.randn(32, 32)))) == ""
    assert census_note(nn.Sequential(nn.Linear(8, 8))) == ""  # a dense checkpoint: the config line says so
