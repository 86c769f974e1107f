"""Block-quantised weights (FP8 e4m3 with 128x128 fp32 scales, FP4 e2m1 packed two per byte with 1x32 UE8M0
scales) dequantise to what was quantised, and a V4 checkpoint stored that way loads into the same model as
its dequantised twin."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine.models.block_quant import FP4_E2M1, DequantizedCheckpoint, dequantize
from safetensors.torch import load_file, save_file
from v4_checkpoints import V4Driver, load_engine_v4, write_v4_checkpoint

FP8_MAX = 448.0


def quantize_fp8(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = w.shape
    grid = w.reshape(rows // block, block, cols // block, block)
    scale = grid.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX
    q = (grid / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    return q.reshape(rows, cols), scale.float()


def quantize_fp4(w: torch.Tensor, group: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest e2m1 value per element, power-of-two (UE8M0, stored as uint8 exponents) scale per 1 x group."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group)
    exponent = torch.ceil(torch.log2(g.abs().amax(-1).clamp(min=1e-30) / 6.0)).clamp(-127, 127)
    scaled = g / torch.exp2(exponent)[..., None]
    lut = torch.tensor(FP4_E2M1)
    codes = (scaled[..., None] - lut).abs().argmin(-1).reshape(rows, cols).to(torch.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8).view(torch.int8)
    return packed, (exponent + 127).to(torch.uint8)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.floats(1e-3, 1e3), st.integers(0, 2**31 - 1))
def test_fp8_blocks_round_trip(rb: int, cb: int, magnitude: float, seed: int) -> None:
    w = torch.randn(rb * 128, cb * 128, generator=torch.Generator().manual_seed(seed)) * magnitude
    q, scale = quantize_fp8(w, 128)
    back = dequantize(q, scale)
    assert torch.equal(back, q.float().reshape(rb, 128, cb, 128).mul(scale[:, None, :, None]).reshape(w.shape))
    blockmax = w.reshape(rb, 128, cb, 128).abs().amax(dim=(1, 3))[:, None, :, None]
    assert bool(((back - w).abs().reshape(rb, 128, cb, 128) <= blockmax / 8).all())  # e4m3: 3 mantissa bits


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_fp4_exact_on_representable_values(rows: int, groups: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    lut = torch.tensor(FP4_E2M1)
    codes = torch.randint(0, 16, (rows, groups * 32), generator=g)
    exps = torch.randint(-10, 10, (rows, groups), generator=g).float()
    w = lut[codes] * torch.exp2(exps).repeat_interleave(32, dim=1)
    packed, scale = quantize_fp4(w)
    assert torch.equal(dequantize(packed, scale), w)


@pytest.fixture(scope="module")
def quantized_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same tiny V4 twice: FP8 attention projections + FP4 experts with scales, and dequantised."""
    src = write_v4_checkpoint(tmp_path_factory.mktemp("v4q_src"), "mixed")
    tensors = load_file(src / "model.safetensors")
    quant: dict[str, torch.Tensor] = {}
    plain: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if name.endswith(("attn.wq_b.weight", "attn.wo_b.weight")):  # shapes divide into 16 x 16 blocks
            q, s = quantize_fp8(t, 16)
            quant[name], quant[name[: -len("weight")] + "scale"] = q, s
            plain[name] = dequantize(q, s)
        elif ".experts." in name and t.shape[1] % 32 == 0:
            q4, s4 = quantize_fp4(t)
            quant[name], quant[name[: -len("weight")] + "weight_scale_inv"] = q4, s4
            plain[name] = dequantize(q4, s4)
        else:
            quant[name] = plain[name] = t
    out = []
    for kind, data in (("quant", quant), ("plain", plain)):
        path = tmp_path_factory.mktemp(f"v4q_{kind}")
        (path / "config.json").write_text((src / "config.json").read_text())
        save_file(data, str(path / "model.safetensors"))
        out.append(path)
    return out[0], out[1]


def test_quantized_checkpoint_loads_as_its_dequantized_twin(quantized_pair: tuple[Path, Path]) -> None:
    quant, plain = quantized_pair
    assert DequantizedCheckpoint(load_file(quant / "model.safetensors")).num_quantized > 0
    ids = torch.randint(2, 96, (12,), generator=torch.Generator().manual_seed(5)).tolist()
    a = V4Driver(load_engine_v4(quant)).step([(0, 0, ids)])[0]
    b = V4Driver(load_engine_v4(plain)).step([(0, 0, ids)])[0]
    assert torch.equal(a, b)
