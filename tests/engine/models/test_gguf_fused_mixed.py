"""The fused decode step over a GGUF file's own blocks in the 32-weight formats (Q4_0, Q5_0, Q5_1) and with rows of
several formats in one linear (q/k/v of Q5_0 + Q5_0 + Q8_0, as llama-quantize writes SmolLM2 at Q4_K_M): it runs
(the descriptors build), equals the layered path over the same blocks (logits within 1e-4: fp32 products summed in
another order, SiLU's expf; greedy tokens equal), and the fast path's greedy tokens equal the exact reference's
(weights dequantised to fp32, layered step, torch's norm) on the same file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as T
from model_driver import PagedDriver, paged_greedy
from qwen2_checkpoints import make_hf_qwen2, write_qwen2_gguf
from recipe.engine.kernels.fused_llama import FusedLlamaDecoder, _gguf_linear
from recipe.engine.kernels.native import library
from recipe.engine.layers.gguf_linear import GGUFLinear
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.models.gguf_loader import load_gguf
from recipe.engine.models.registry import load_model

pytestmark = pytest.mark.skipif(library() is None, reason="no C compiler: the fused step cannot be built")

# llama-quantize's Q4_K_M for rows of 160 (not a multiple of 256): Q5_0, v in Q8_0; ffn_down's rows of 256 Q6_K
Q4_K_M_160 = {"*": T.Q5_0, "attn_v.weight": T.Q8_0, "ffn_down.weight": T.Q6_K, "token_embd.weight": T.Q8_0}
PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11]
FILES = {"Q4_K_M-160": (Q4_K_M_160, {"hidden": 160, "inter": 256}), "Q4_0": (T.Q4_0, {}),
         "Q5_1": (T.Q5_1, {"hidden": 128, "inter": 256})}


@pytest.fixture(scope="module", params=list(FILES))
def gguf_file(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    qtypes, shape = FILES[request.param]
    hf = make_hf_qwen2(21, tied=request.param != "Q4_0", **shape)
    return write_qwen2_gguf(hf, tmp_path_factory.mktemp("fused") / f"{request.param}.gguf", qtypes)


def fast_model(path: Path, backend: str) -> torch.nn.Module:
    """The default fast path's model: the file's blocks with fp32 activations, native norms, `backend` steps."""
    model, _ = load_gguf(path, weight_format="gguf")
    for m in model.modules():
        if isinstance(m, RMSNorm):
            m.backend = "native"
    model.decode_backend = backend
    return model


def steps(drv: PagedDriver) -> list[torch.Tensor]:
    """Prefills (fused: at most 64 tokens) and decode batches of varied contexts."""
    out = [drv.step([(0, PROMPT)]), drv.step([(1, PROMPT[:5])]), drv.step([(2, PROMPT[3:4])])]
    for t in range(6):
        out.append(drv.step([(0, [10 + t]), (1, [40 + t]), (2, [90 + t])]))
    return out


def test_the_fused_step_runs_and_equals_the_layered_step(gguf_file: Path) -> None:
    runs = []
    for backend in ("layers", "fused"):
        model = fast_model(gguf_file, backend)
        runs.append(steps(PagedDriver(model, num_seqs=3, max_len=48, shuffle_seed=2, attention_backend="native")))
        assert isinstance(model._fused, FusedLlamaDecoder) == (backend == "fused")
    qkv = model.decoder_layers()[0].self_attn.qkv
    assert isinstance(qkv, GGUFLinear)
    if gguf_file.stem == "Q4_K_M-160":
        assert qkv.qtypes == [int(T.Q5_0), int(T.Q5_0), int(T.Q8_0)]
    for ref, got in zip(*runs, strict=True):
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)
        assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_a_fused_row_gets_the_same_bits_alone_or_batched(gguf_file: Path) -> None:
    model = fast_model(gguf_file, "fused")
    batched = PagedDriver(model, num_seqs=3, max_len=32, attention_backend="native")
    for i in range(3):
        batched.step([(i, PROMPT[i:])])
    together = batched.step([(0, [9]), (1, [19]), (2, [29])])
    for i, token in enumerate((9, 19, 29)):
        alone = PagedDriver(model, num_seqs=1, max_len=32, attention_backend="native")
        alone.step([(0, PROMPT[i:])])
        assert torch.equal(alone.step([(0, [token])])[0], together[i])


def test_the_fast_paths_greedy_tokens_equal_the_exact_references(gguf_file: Path) -> None:
    reference, _ = load_model(gguf_file)  # dequantised to fp32, layered step, torch's norm
    expected = paged_greedy(reference, PROMPT, 16)
    assert paged_greedy(fast_model(gguf_file, "fused"), PROMPT, 16, attention_backend="native") == expected
    assert len(set(expected)) > 3


def test_parts_must_end_on_the_kernels_groups_of_four_rows() -> None:
    """Else the layered path runs (a group of 4 outputs would span two formats)."""
    k = 64
    raw = {q: torch.zeros(8, {T.Q5_0: 22, T.Q8_0: 34}[q] * k // 32, dtype=torch.uint8) for q in (T.Q5_0, T.Q8_0)}
    ok = GGUFLinear([(int(T.Q5_0), raw[T.Q5_0]), (int(T.Q8_0), raw[T.Q8_0][:6])], k)
    desc = _gguf_linear(ok, None)
    assert desc is not None and desc.parts == 2 and [desc.part[i].end for i in range(2)] == [8, 14]
    assert [desc.part[i].qtype for i in range(2)] == [int(T.Q5_0), int(T.Q8_0)]
    assert _gguf_linear(GGUFLinear([(int(T.Q5_0), raw[T.Q5_0][:6]), (int(T.Q8_0), raw[T.Q8_0])], k), None) is None
