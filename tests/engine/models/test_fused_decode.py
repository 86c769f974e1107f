"""The fused decode step (`decode_backend="fused"`, engine/kernels/fused_llama.py) equals the layered path it
replaces (native attention and RMSNorm, same weight format).

Tolerances, and why they are not zero:
- fp32 weights: the fused kernel sums each matrix product in its own order (torch's matmul uses another), and
  SiLU uses the C library's expf (torch its own vectorised exp): logits within 1e-4.
- q8_0 / q4_1: the products, norms, RoPE and attention are the same kernels on the same values; but the
  activations are rounded to Q8_0 blocks before each product, so a one-ulp SiLU difference can move one
  activation by one quantisation step (|x|max / 127 of its block), which then stays in that sequence's KV.
  Logits agree within 0.1 (a few quantisation steps of these models' activations), and greedy tokens agree.
A row's result never depends on the rest of the batch: bit for bit, alone or batched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from model_driver import PagedDriver, hf_logits
from recipe.engine import LLM, SamplingParams
from recipe.engine.config import EngineConfig
from recipe.engine.kernels.fused_llama import MAX_SHARED_ROWS, FusedLlamaDecoder
from recipe.engine.kernels.native import library
from recipe.engine.layers.rmsnorm import RMSNorm
from recipe.engine.models.base import DecoderLM
from recipe.engine.models.registry import load_model

pytestmark = pytest.mark.skipif(library() is None, reason="no C compiler: the fused step cannot be built")

PROMPT = [5, 17, 42, 99, 3, 250, 7, 7, 128, 64, 33, 200, 11]
TOLERANCE = {"dtype": 1e-4, "q8_0": 0.1, "q4_1": 0.1}


def _model(path: Path, fmt: str, backend: str, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    model, _ = load_model(path, dtype=dtype)
    if fmt != "dtype":
        model.quantize_weights(fmt)
    for m in model.modules():
        if isinstance(m, RMSNorm):
            m.backend = "native"
    model.decode_backend = backend
    return model


def _steps(drv: PagedDriver) -> list[torch.Tensor]:
    """Prefills and mixed steps (fused: at most MAX_SHARED_ROWS tokens) between decode-only steps of varied
    context lengths."""
    out = [drv.step([(0, PROMPT)]), drv.step([(1, PROMPT[:5])]), drv.step([(2, PROMPT[3:4])])]
    for t in range(5):
        out.append(drv.step([(0, [10 + t]), (1, [40 + t]), (2, [90 + t])]))
    out.append(drv.step([(1, [3]), (3, PROMPT[:9]), (0, [160])]))
    for t in range(4):
        out.append(drv.step([(3, [7 + t]), (2, [200 + t]), (0, [t]), (1, [250 - t])]))
    return out


@pytest.mark.parametrize("fmt", ["dtype", "q8_0", "q4_1"])
@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_llama_variant_dir"])
def test_fused_decode_equals_the_layered_path(fixture: str, fmt: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    runs = []
    for backend in ("layers", "fused"):
        model = _model(path, fmt, backend)
        drv = PagedDriver(model, num_seqs=4, max_len=48, shuffle_seed=3, attention_backend="native")
        runs.append(_steps(drv))
        assert isinstance(model._fused, FusedLlamaDecoder) == (backend == "fused")
    for ref, got in zip(*runs, strict=True):
        torch.testing.assert_close(got, ref, atol=TOLERANCE[fmt], rtol=0)
        assert torch.equal(got.argmax(-1), ref.argmax(-1))


@pytest.mark.parametrize("fixture", ["tiny_llama_dir", "tiny_llama_variant_dir"])
@pytest.mark.parametrize("prompt_len", [13, 80])
def test_the_fused_step_matches_transformers(fixture: str, prompt_len: int, request: pytest.FixtureRequest) -> None:
    """The oracle for the engine's default decode backend: a prefill (fused up to MAX_SHARED_ROWS tokens, layered
    past it), then every decode step fused, logits within 1e-4 of `transformers` on the same checkpoint (the
    variant: tied embeddings, biases, llama3 RoPE past its original context)."""
    from transformers import LlamaForCausalLM

    path = request.getfixturevalue(fixture)
    hf = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokens = [(7 * i + 3) % 256 for i in range(prompt_len + 10)]
    ref = hf_logits(hf, tokens)
    model, _ = load_model(path)
    model.decode_backend = "fused"
    drv = PagedDriver(model, num_seqs=1, max_len=96)
    torch.testing.assert_close(drv.step([(0, tokens[:prompt_len])]), ref[:prompt_len], atol=1e-4, rtol=0)
    assert isinstance(model._fused, FusedLlamaDecoder)
    for i in range(prompt_len, len(tokens)):
        torch.testing.assert_close(drv.step([(0, [tokens[i]])])[0], ref[i], atol=1e-4, rtol=0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), block=st.sampled_from([1, 4, 16]), fmt=st.sampled_from(["dtype", "q8_0", "q4_1"]),
       spans=st.lists(st.tuples(st.integers(1, 150), st.integers(1, 9)), min_size=1, max_size=6),
       decode_only=st.booleans())
def test_fused_rows_equal_the_layered_path_and_decoding_alone(tiny_llama_dir: Path, seed: int, block: int, fmt: str,
                                                              spans: list[tuple[int, int]], decode_only: bool) -> None:
    """A step of random sequences (context lengths, scattered block tables), each bringing one new token (a decode
    batch, `decode_only`) or several (a speculative verify step's k+1 positions, a short prefill): every token's
    fused hidden state is bit-identical to the same token decoded alone after the ones before it (a row's result
    never depends on the batch), and its logits match the layered path's."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n, _ in spans]
    news = [torch.randint(3, 256, (1 if decode_only else k,), generator=g).tolist() for _, k in spans]
    assert sum(map(len, news)) <= MAX_SHARED_ROWS  # the whole step runs fused
    got = {}
    for backend in ("layers", "fused"):
        model = _model(tiny_llama_dir, fmt, backend)
        drv = PagedDriver(model, num_seqs=len(spans), max_len=160, block_size=block, shuffle_seed=seed,
                          attention_backend="native")
        for i, p in enumerate(prompts):
            drv.step([(i, p)])
        if backend == "layers":
            got[backend] = drv.step(list(enumerate(news)))
            continue
        # compare final hidden states bit for bit (torch's LM-head matmul may round differently per batch size)
        model.compute_logits = lambda h: h  # type: ignore[method-assign]
        hidden = drv.step(list(enumerate(news)))
        row = 0
        for i, toks in enumerate(news):  # the same tokens again, one decode step each (their slots rewritten)
            drv.lens[i] -= len(toks)
            for t in toks:
                assert torch.equal(drv.step([(i, [t])])[0], hidden[row])
                row += 1
        with torch.inference_mode():
            got[backend] = type(model).compute_logits(model, hidden)
    torch.testing.assert_close(got["fused"], got["layers"], atol=TOLERANCE[fmt], rtol=0)


@pytest.mark.parametrize("fmt", ["dtype", "q8_0", "q4_1"])
def test_engine_greedy_tokens_equal_with_the_fused_step_on_and_off(tiny_llama_dir: Path, fmt: str) -> None:
    """Continuous batching: more prompts than sequences per step, a small token budget (chunked prefills beside
    decodes), prompts of different lengths."""
    prompts = [PROMPT, PROMPT[:7], [9, 8, 7, 6, 5, 4, 3, 2, 1, 250, 251], PROMPT[4:], [77] * 5, PROMPT[::-1]]
    params = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True, logprobs=1)
    config = {"dtype": "float32", "num_threads": 1, "num_kv_blocks": 64, "block_size": 4, "max_num_seqs": 3,
              "max_num_batched_tokens": 8, "weight_format": fmt, "attention_backend": "native",
              "norm_backend": "native"}
    runs = []
    for backend in ("layers", "fused"):
        llm = LLM(str(tiny_llama_dir), decode_backend=backend, **config)
        runs.append(llm.generate(prompts, params))
        llm.shutdown()
    ref, got = runs
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in ref]
    for a, b in zip(got, ref, strict=True):
        assert a.new_logprobs is not None and b.new_logprobs is not None
        for x, y in zip(a.new_logprobs, b.new_logprobs, strict=True):
            assert x is not None and y is not None
            assert x[0] == pytest.approx(y[0], abs=TOLERANCE[fmt])


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10**6), fmt=st.sampled_from(["dtype", "q8_0", "q4_1"]), k=st.sampled_from([1, 3, 6]),
       n_prompts=st.integers(1, 4), block=st.sampled_from([2, 4, 16]))
def test_speculation_on_the_fused_step_is_bit_identical_to_decoding(tiny_llama_dir: Path, seed: int, fmt: str, k: int,
                                                                    n_prompts: int, block: int) -> None:
    """With every step fused (at most MAX_SHARED_ROWS tokens a step), a verify step computes each position as a
    decode step does: greedy tokens equal without speculation, and their logprobs equal bit for bit."""
    g = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(n_prompts):  # pieces that recur, so prompt lookup drafts
        piece = torch.randint(3, 256, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        prompts.append((piece * 4)[:13])
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, logprobs=2)
    config = {"dtype": "float32", "num_threads": 2, "num_kv_blocks": 256, "block_size": block, "max_num_seqs": 4,
              "max_num_batched_tokens": MAX_SHARED_ROWS, "weight_format": fmt, "attention_backend": "native",
              "norm_backend": "native", "decode_backend": "fused", "enable_prefix_caching": False}
    runs, accepted = [], 0
    for spec in ({}, {"speculative": "ngram", "num_speculative_tokens": k}):
        llm = LLM(str(tiny_llama_dir), **config, **spec)  # type: ignore[arg-type]
        runs.append(llm.generate(prompts, params))
        if spec:
            accepted = llm.engine.stats().speculative.accepted_tokens
        llm.shutdown()
    ref, got = runs
    assert [o.new_token_ids for o in got] == [o.new_token_ids for o in ref]
    assert [o.new_logprobs for o in got] == [o.new_logprobs for o in ref]
    assert accepted > 0  # drafts were verified and kept: the equality covers verify steps


def test_where_the_fused_step_does_not_apply_the_layered_path_runs(tiny_llama_dir: Path, tiny_deepseek_dir: Path) -> None:
    """fp64, torch's int8 weights: no fused step (the outputs are the layered path's, bit for bit); a DeepSeek
    model ignores the option."""
    for dtype, fmt in ((torch.float64, "dtype"), (torch.float32, "int8")):
        runs = []
        for backend in ("layers", "fused"):
            model = _model(tiny_llama_dir, fmt, backend, dtype)
            drv = PagedDriver(model, num_seqs=4, max_len=48, cache_dtype=dtype, shuffle_seed=5,
                              attention_backend="native")
            runs.append(_steps(drv))
            assert model._fused is None or backend == "layers"
        for ref, got in zip(*runs, strict=True):
            assert torch.equal(got, ref)
    llm = LLM(str(tiny_deepseek_dir), dtype="float32", num_threads=1, num_kv_blocks=32, block_size=4,
              decode_backend="fused")
    assert len(llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))[0].new_token_ids) == 4
    llm.shutdown()


def test_decode_backend_is_checked() -> None:
    with pytest.raises(ValueError, match="decode_backend must be 'layers' or 'fused'"):
        EngineConfig.from_kwargs(model="m", decode_backend="fast")


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 9), tied=st.booleans())
def test_the_fused_lm_head_equals_torchs_and_ignores_the_batch(tiny_llama_dir: Path, tiny_llama_variant_dir: Path,
                                                               seed: int, rows: int, tied: bool) -> None:
    """An fp32 head (tied embedding table or `lm_head`) through the native product: logits within 1e-4 of torch's,
    and each row bit-identical to the same row computed alone. A quantised head keeps its own kernel."""
    model = _model(tiny_llama_variant_dir if tied else tiny_llama_dir, "dtype", "fused")
    PagedDriver(model, num_seqs=1, max_len=8, attention_backend="native")  # binds the KV cache
    assert (model.lm_head is None) == tied
    hidden = torch.randn(rows, model.config.hidden_size, generator=torch.Generator().manual_seed(seed)) * 3
    fused = model._fused_decoder()
    assert fused is not None and fused.has_head
    with torch.inference_mode():
        got = model.compute_logits(hidden)
        ref = DecoderLM.compute_logits(model, hidden)
        assert not torch.equal(got, ref)  # another summation order: the native product did run
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)
        for i in range(rows):
            assert torch.equal(model.compute_logits(hidden[i : i + 1])[0], got[i])
    quantized = _model(tiny_llama_dir, "q8_0", "fused")
    PagedDriver(quantized, num_seqs=1, max_len=8, attention_backend="native")
    quantized_fused = quantized._fused_decoder()
    assert quantized_fused is not None and not quantized_fused.has_head
