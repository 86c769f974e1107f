"""The demo GGUF (SmolLM2's Q4_1 file) with the engine's default weight format: every linear and the LM head
compute on the file's blocks, none falls back to a dense fp32 layer, and the start-up line says nothing about
dense linears."""

from __future__ import annotations

from recipe.engine.config import KernelConfig
from recipe.engine.linear_census import census_note, linear_census
from recipe.engine.models.gguf_loader import load_gguf
from recipe.engine.models.registry import smollm2_path


def test_demo_gguf_defaults_leave_no_linear_dense() -> None:
    fmt = KernelConfig().resolved_for("smollm2").weight_format
    model, _ = load_gguf(smollm2_path(), weight_format=fmt)
    census = linear_census(model)
    layers = len(model.decoder_layers())
    assert census == {"blocks": 4 * layers + 1}  # q/k/v, o, gate/up, down per layer, and the head
    assert census_note(model) == ""
