"""What a loaded model's linear layers actually run on: the start-up line names the configured path, and this
says how many linears it reached (a GGUF whose tensors are in a format without a native kernel, such as
IQ4_XS or F16, has those weights dequantised to dense layers)."""

from __future__ import annotations

from collections import Counter

from recipe.engine.layers.block_quant_linear import Q4_1Linear, Q8_0Linear
from recipe.engine.layers.gguf_linear import GGUFLinear
from torch import nn


def linear_census(model: nn.Module) -> Counter[str]:
    """{"blocks": linears computing on quantised blocks, "dense": plain `nn.Linear`s}."""
    census: Counter[str] = Counter()
    for module in model.modules():
        if isinstance(module, GGUFLinear | Q8_0Linear | Q4_1Linear):
            census["blocks"] += 1
        elif isinstance(module, nn.Linear):
            census["dense"] += 1
    return census


def census_note(model: nn.Module) -> str:
    """"; 90 of 121 linears dense (…)" where block weights were asked for but some
    linears stayed dense; "" otherwise."""
    c = linear_census(model)
    total = c["blocks"] + c["dense"]
    if not c["blocks"] or not c["dense"]:
        return ""
    return f"; {c['dense']} of {total} linears dense (their file format has no native kernel)"
