"""A GGUF loaded over its own blocks (`load_gguf(weight_format="gguf"/"gguf_q8")`, what `LLM(path)` does by
default) equals the reference way, everything dequantised to fp32 and then `quantize_weights` (the old default):
- the same logits bit for bit, prefill and decode steps, on tiny qwen2 (tied and untied) and llama (permuted Q/K
  rows, llama3 RoPE) files in Q4_K_M's mix, Q4_K, Q5_K, Q6_K and Q8_0: the layers hold the same bytes and the
  embedding's rows dequantise with gguf-py's fp32 operations (a property test below);
- the same greedy tokens and logprobs through `LLM` with the default fast path (fused decode step);
- loading grows the process's peak memory by about the file's size, where the reference grows it several times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as gguf_dequantize
from hypothesis import given, settings
from hypothesis import strategies as st
from model_driver import PagedDriver
from qwen2_checkpoints import make_hf_llama3, make_hf_qwen2, write_qwen2_gguf
from recipe.engine import LLM, SamplingParams
from recipe.engine.layers.gguf_blocks import SIZES
from recipe.engine.layers.gguf_embedding import GGUFEmbedding
from recipe.engine.layers.gguf_linear import GGUFLinear
from recipe.engine.models.gguf_weights import LoadedFileLayers
from recipe.engine.models.registry import load_model
from recipe.engine.models.weights import CheckpointError

ROOT = Path(__file__).resolve().parents[3]
PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11, 256, 258]
Q4_K_M = {"*": T.Q4_K, "attn_v.weight": T.Q6_K, "ffn_down.weight": T.Q6_K, "output.weight": T.Q6_K}
# (name, architecture, tied head, layout)
CASES = [("Q4_K_M", "qwen2", False, Q4_K_M), ("Q4_K", "qwen2", True, T.Q4_K), ("Q5_K", "qwen2", False, T.Q5_K),
         ("Q6_K", "qwen2", True, T.Q6_K), ("Q8_0", "qwen2", False, T.Q8_0), ("Q4_K_M", "llama", False, Q4_K_M)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[1]}-{c[0]}-{'tied' if c[2] else 'untied'}")
def gguf_path(request, tmp_path_factory) -> Path:
    name, arch, tied, layout = request.param
    hf = make_hf_llama3(21) if arch == "llama" else make_hf_qwen2(21 if tied else 22, tied=tied)
    return write_qwen2_gguf(hf, tmp_path_factory.mktemp("g") / f"{arch}-{name}.gguf", layout)


def reference(path: Path, fmt: str) -> Any:
    """The old default: every tensor dequantised to fp32, then the linears swapped for the file's blocks."""
    model, _ = load_model(path)
    assert model.quantize_weights(fmt) == 4 * model.config.num_layers + 1  # every linear and the head
    return model


def run_steps(model: Any, decode: list[int]) -> torch.Tensor:
    drv = PagedDriver(model, num_seqs=2, max_len=64)
    rows = [drv.step([(0, PROMPT), (1, PROMPT[:7])])]
    rows += [drv.step([(0, [t]), (1, [t + 1])]) for t in decode]
    return torch.cat(rows)


@pytest.mark.parametrize("fmt", ["gguf", "gguf_q8"])
def test_logits_equal_the_reference_bit_for_bit(gguf_path: Path, fmt: str) -> None:
    ref = reference(gguf_path, fmt)
    model, _ = load_model(gguf_path, weight_format=fmt)
    assert isinstance(model.gguf_blocks, LoadedFileLayers)
    assert model.quantize_weights(fmt) == 4 * model.config.num_layers + 1
    assert isinstance(model.embed_tokens, GGUFEmbedding)
    decode = [3, 77, 140, 201, 9, 256]
    assert torch.equal(run_steps(model, decode), run_steps(ref, decode))


def block_layers(model: Any) -> list[Any]:
    out = [model.logits_head]
    for layer in model.decoder_layers():
        out += [layer.self_attn.qkv, layer.self_attn.o_proj, layer.mlp.gate_up, layer.mlp.down]
    return out


def test_the_layers_hold_the_references_bytes(gguf_path: Path) -> None:
    ref = reference(gguf_path, "gguf")
    model, _ = load_model(gguf_path, weight_format="gguf")
    for ours, theirs in zip(block_layers(model), block_layers(ref), strict=True):
        assert isinstance(ours, GGUFLinear) and ours.qtypes == theirs.qtypes
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(ours.raw_parts(), theirs.raw_parts(), strict=True))
        assert (ours.bias is None) == (theirs.bias is None)
        assert ours.bias is None or torch.equal(ours.bias, theirs.bias)
    assert torch.equal(model.embed_tokens.weight, ref.embed_tokens.weight)  # the table, where asked for
    assert model.lm_head is (None if ref.lm_head is None else model.logits_head)


def test_llm_greedy_tokens_and_logprobs_equal_the_reference(gguf_path: Path) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=12, logprobs=3, ignore_eos=True)
    ours = LLM(str(gguf_path), num_kv_blocks=64)
    ref, info = load_model(gguf_path)
    theirs = LLM((ref, info), num_kv_blocks=64, weight_format="gguf", attention_backend="native",
                 norm_backend="native")
    assert ours.engine.config.compute_path == theirs.engine.config.compute_path
    prompts = [PROMPT, [*PROMPT[:5], 259, 260]]
    a, b = ours.generate(prompts, params), theirs.generate(prompts, params)
    assert [o.new_token_ids for o in a] == [o.new_token_ids for o in b]
    assert [o.new_logprobs for o in a] == [o.new_logprobs for o in b]
    assert len(set(a[0].new_token_ids)) > 2


def test_a_model_loaded_for_one_format_refuses_the_other(gguf_path: Path) -> None:
    model, _ = load_model(gguf_path, weight_format="gguf_q8")
    with pytest.raises(CheckpointError, match="gguf_q8"):
        model.quantize_weights("gguf")


@st.composite
def quantised_rows(draw: st.DrawFn) -> tuple[int, int, np.ndarray, list[int]]:
    qtype = draw(st.sampled_from(sorted(SIZES)))
    per, nbytes = SIZES[qtype]
    blocks = draw(st.integers(1, 3))
    vocab = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    raw = np.random.default_rng(seed).integers(0, 256, size=(vocab, blocks * nbytes), dtype=np.uint8)
    ids = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=24))
    return qtype, blocks * per, raw, ids


@settings(max_examples=60, deadline=None)
@given(quantised_rows(), st.sampled_from([torch.float32, torch.bfloat16]))
def test_embedding_rows_equal_gguf_pys_dequantised_table(case: tuple[int, int, np.ndarray, list[int]],
                                                          dtype: torch.dtype) -> None:
    """Any bytes (NaN and inf scales included): a lookup is the fp32 table's row, then cast."""
    qtype, dim, raw, ids = case
    table = torch.from_numpy(np.asarray(gguf_dequantize(raw, T(qtype)), dtype=np.float32).reshape(len(raw), dim))
    emb = GGUFEmbedding(torch.from_numpy(raw), qtype, dim, dtype)
    got = emb(torch.tensor(ids))
    torch.testing.assert_close(got, table.to(dtype)[ids], rtol=0, atol=0, equal_nan=True)


CHILD = """
import json, sys
from pathlib import Path
import torch
from recipe.engine.models.registry import load_model

def status():
    return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in
            Path("/proc/self/status").read_text().splitlines()) if k in ("VmHWM", "VmRSS")}

torch.empty(1, device="meta").normal_()  # torch's one-time import for meta init (sympy, dynamo: ~150 MB), which
# every model built on the meta device pays, whatever its loader
before = status()["VmRSS"]
Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from the present resident set
model, info = load_model(sys.argv[1], weight_format=sys.argv[2])
print(json.dumps({"before": before, "peak": status()["VmHWM"]}))
"""


def load_growth(path: Path, fmt: str) -> int:
    """Peak resident growth (bytes) of loading `path` in a fresh process, after its imports."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), fmt], capture_output=True, text=True, check=True)
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return int(r["peak"] - r["before"])


def test_loading_over_the_blocks_grows_memory_by_about_the_files_size(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from gguf_memory import SHAPES, write_synthetic_gguf

    path = tmp_path / "small-Q4_K_M.gguf"
    size = write_synthetic_gguf(path, SHAPES["small"])
    assert size > 30 << 20
    ours = load_growth(path, "gguf")
    # the blocks (the file's size) plus what does not grow with the weights: header, tokenizer (~13 MB here)
    assert ours < 1.5 * size, (ours, size)
    # the measurement sees the reference's fp32 copy (7x the file in Q4_K), so it would see one here
    assert load_growth(path, "dtype") > 4 * size
