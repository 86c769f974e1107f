"""Tiny synthetic Qwen2 GGUFs in each quantisation DeepSeek-R1-Distill ships (Q4_K_M's mix, Q5_K, Q6_K, Q8_0,
and pure Q4_K), in the 32-weight formats (Q4_0, Q5_0, Q5_1), and in the mix llama-quantize writes at Q4_K_M for a
model whose hidden size is not a multiple of 256 (SmolLM2: Q5_0 and Q8_0 fallbacks, K-quants where rows allow),
written with `gguf`:
- the exact path (`weight_format="dtype"`) equals `transformers` Qwen2 on the gguf-py-dequantised weights;
- the file's own blocks with fp32 activations (`weight_format="gguf"`, the default) equal it too (logits to 1e-4,
  greedy tokens identical): the products are x times exactly the dequantised weights;
- with Q8_0-rounded activations (`"gguf_q8"`, llama.cpp's arithmetic) they follow `transformers` Qwen2 with each
  linear's input rounded to Q8_0 blocks as the kernels round it, and the plain dequantised oracle within the
  activation rounding's tolerance; the native kernels follow the same layers' pure-torch expression.
Between two rounded paths that sum in different orders, an activation a hair from a Q8_0 rounding boundary can round the
other way and move the logits of these tiny random (chaotic) models by up to ~0.1 of ~7 (mean ~0.012), so the model-level
comparisons bound the mean and maximum difference and compare the greedy choice, teacher-forced, wherever the
oracle's top-2 margin is clear of that; the layer tests (test_gguf_blocks.py) hold the products to 1e-5."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from gguf import GGMLQuantizationType as T
from model_driver import PagedDriver, hf_greedy, hf_logits, paged_greedy
from qwen2_checkpoints import hf_with_gguf_weights, make_hf_qwen2, write_qwen2_gguf
from recipe.engine.layers.block_quant_linear import round_activations
from recipe.engine.layers.gguf_linear import GGUFLinear
from recipe.engine.models.registry import load_model

PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11, 256, 258]
Q4_K_M = {"*": T.Q4_K, "attn_v.weight": T.Q6_K, "ffn_down.weight": T.Q6_K, "output.weight": T.Q6_K}
# hidden 160: rows of 160 take the fallbacks (Q5_0 for Q4_K, Q8_0 for Q6_K); ffn_down's rows of 256 stay K-quants
Q4_K_M_160 = {"*": T.Q5_0, "attn_v.weight": T.Q8_0, "ffn_down.weight": T.Q6_K, "token_embd.weight": T.Q8_0}
FILES = {"Q4_K_M": Q4_K_M, "Q4_K": T.Q4_K, "Q5_K_M": {"*": T.Q5_K, "attn_v.weight": T.Q6_K},
         "Q6_K": T.Q6_K, "Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "Q5_0": T.Q5_0, "Q5_1": T.Q5_1, "Q4_K_M-160": Q4_K_M_160}
SHAPES = {"Q4_K_M-160": {"hidden": 160, "inter": 256}}


# each file once, tied and untied heads alternating (both kinds are covered, the suite stays short)
CASES = [("Q4_K_M", False), ("Q4_K", True), ("Q5_K_M", True), ("Q6_K", False), ("Q8_0", True), ("Q4_0", False),
         ("Q5_0", True), ("Q5_1", False), ("Q4_K_M-160", True)]


@pytest.fixture(scope="module", params=CASES,
                ids=lambda p: f"{p[0]}-{'tied' if p[1] else 'untied'}")
def case(request, tmp_path_factory) -> tuple[Path, Any]:
    name, tied = request.param
    hf = make_hf_qwen2(11 if tied else 12, tied=tied, **SHAPES.get(name, {}))
    path = write_qwen2_gguf(hf, tmp_path_factory.mktemp("q") / f"{name}.gguf", FILES[name])
    return path, hf_with_gguf_weights(hf, path)


def rounding_oracle(oracle: Any) -> Any:
    """`oracle` with every linear's input rounded to Q8_0 blocks of 32, as the block kernels see it."""
    import copy

    model = copy.deepcopy(oracle)
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(
                lambda _m, args: (round_activations(args[0].reshape(-1, args[0].shape[-1])).view(args[0].shape),))
    return model


FLIP_MAX, FLIP_MEAN, MARGIN = 0.2, 0.03, 0.3


def assert_follows(got: torch.Tensor, ref: torch.Tensor) -> None:
    diff = (got - ref).abs()
    assert diff.max() <= FLIP_MAX and diff.mean() <= FLIP_MEAN, (float(diff.max()), float(diff.mean()))
    top = ref.topk(2, dim=-1).values
    clear = (top[:, 0] - top[:, 1]) > MARGIN
    assert clear.sum() >= 5
    assert torch.equal(got.argmax(-1)[clear], ref.argmax(-1)[clear])


def test_exact_path_equals_transformers_on_the_dequantised_weights(case) -> None:
    path, oracle = case
    model, _ = load_model(path)
    got = PagedDriver(model, num_seqs=1, max_len=64).step([(0, PROMPT)])
    torch.testing.assert_close(got, hf_logits(oracle, PROMPT), atol=1e-4, rtol=0)


def test_file_blocks_with_fp32_activations_equal_transformers_on_the_dequantised_weights(case) -> None:
    path, oracle = case
    model, _ = load_model(path)
    assert model.quantize_weights("gguf") == 4 * model.config.num_layers + 1  # every linear and the head
    torch.testing.assert_close(PagedDriver(model, num_seqs=1, max_len=64).step([(0, PROMPT)]),
                               hf_logits(oracle, PROMPT), atol=1e-4, rtol=0)
    expected = hf_greedy(oracle, PROMPT, 16)
    assert paged_greedy(model, PROMPT, 16) == expected and len(set(expected)) > 3


def test_file_blocks_equal_transformers_with_rounded_activations(case) -> None:
    path, oracle = case
    model, _ = load_model(path)
    assert model.quantize_weights("gguf_q8") == 4 * model.config.num_layers + 1
    rounded = rounding_oracle(oracle)
    ids = PROMPT + hf_greedy(rounded, PROMPT, 16)  # teacher-forced on the oracle's greedy continuation
    assert_follows(PagedDriver(model, num_seqs=1, max_len=64).step([(0, ids)]), hf_logits(rounded, ids))


def test_file_blocks_stay_within_the_activation_roundings_tolerance_of_the_plain_oracle(case) -> None:
    path, oracle = case
    model, _ = load_model(path)
    model.quantize_weights("gguf_q8")
    got = PagedDriver(model, num_seqs=1, max_len=64).step([(0, PROMPT)])
    ref = hf_logits(oracle, PROMPT)
    assert (got - ref).abs().max() <= 0.1 * ref.abs().max()


@pytest.mark.parametrize("fmt", ["gguf", "gguf_q8"])
def test_native_kernels_equal_their_torch_expression_in_the_whole_model(case, fmt, monkeypatch) -> None:
    path, _ = case
    model, _ = load_model(path)
    model.quantize_weights(fmt)
    native = PagedDriver(model, num_seqs=1, max_len=64).step([(0, PROMPT)])
    monkeypatch.setattr("recipe.engine.layers.gguf_linear.library", lambda: None)
    monkeypatch.setattr("recipe.engine.layers.block_quant_linear.library", lambda: None)
    torch_path = PagedDriver(model, num_seqs=1, max_len=64).step([(0, PROMPT)])
    assert_follows(native, torch_path)


def test_q4_k_m_keeps_each_tensors_own_format() -> None:
    """The fused q/k/v of a Q4_K_M file is Q4_K + Q4_K + Q6_K parts; down is Q6_K; the tied head Q4_K."""
    import tempfile

    hf = make_hf_qwen2(11, tied=True)
    with tempfile.TemporaryDirectory() as tmp:
        model, _ = load_model(write_qwen2_gguf(hf, Path(tmp) / "m.gguf", Q4_K_M))
        model.quantize_weights("gguf")
    layer = model.decoder_layers()[0]
    assert isinstance(layer.self_attn.qkv, GGUFLinear) and layer.self_attn.qkv.qtypes == [12, 12, 14]
    assert isinstance(layer.mlp.down, GGUFLinear) and layer.mlp.down.qtypes == [14]
    assert layer.self_attn.qkv.bias is not None
    assert isinstance(model.logits_head, GGUFLinear) and model.logits_head.qtypes == [12]
