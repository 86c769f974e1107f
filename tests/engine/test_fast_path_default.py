"""A GGUF checkpoint runs the fast path by default (the file's own blocks, native attention and norm, the fused
decode step); `exact=True` is the reference for parity tests; explicit options win over both."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from recipe.engine import LLM, SamplingParams
from recipe.engine.config import EngineConfig

sys.path.insert(0, str(Path(__file__).parent / "models"))

from model_driver import hf_greedy
from qwen2_checkpoints import hf_with_gguf_weights, make_hf_qwen2, write_qwen2_gguf


def speed(c: EngineConfig) -> tuple[object, ...]:
    return c.kernels.weight_format, c.kernels.attention_backend, c.kernels.norm_backend, c.kernels.decode_backend


def test_gguf_checkpoints_default_to_the_fast_path_and_folders_to_their_dtype() -> None:
    assert speed(EngineConfig.from_kwargs(model="smollm2")) == ("gguf", "native", "native", "fused")
    assert speed(EngineConfig.from_kwargs(model="/m/DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf")) == ("gguf", "native", "native",
                                                                                       "fused")
    assert speed(EngineConfig.from_kwargs(model="/m/checkpoint-folder")) == ("dtype", None, "torch", "fused")
    assert "fast path: the GGUF file's own quantised blocks" in EngineConfig.from_kwargs(model="smollm2").compute_path


def test_exact_is_the_reference_and_explicit_options_win() -> None:
    assert speed(EngineConfig.from_kwargs(model="smollm2", exact=True)) == ("dtype", "reference", "torch", "layers")
    assert EngineConfig.from_kwargs(model="smollm2", exact=True).compute_path.startswith("exact reference path")
    assert speed(EngineConfig.from_kwargs(model="smollm2", exact=True, weight_format="gguf")) == ("gguf", "reference", "torch",
                                                                                      "layers")
    assert speed(EngineConfig.from_kwargs(model="smollm2", weight_format="dtype", norm_backend="torch")) == (
        "dtype", "native", "torch", "fused")
    with pytest.raises(ValueError, match="weight_format must be one of"):
        EngineConfig.from_kwargs(model="smollm2", weight_format="q4_k")


@pytest.fixture(scope="module")
def r1_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    from gguf import GGMLQuantizationType as T

    hf = make_hf_qwen2(11, tied=True)
    path = write_qwen2_gguf(hf, tmp_path_factory.mktemp("r1") / "tiny-Q4_K_M.gguf",
                            {"*": T.Q4_K, "attn_v.weight": T.Q6_K, "ffn_down.weight": T.Q6_K})
    return path, hf_with_gguf_weights(hf, path)


PROMPTS = [[5, 17, 42, 99, 3, 250, 7], [256, 258, 100, 101, 102], [9, 8, 7, 6, 5, 4, 3, 2, 1, 10, 11, 12]]  # no 0: hf_greedy pads with 0


def test_exact_mode_greedy_equals_transformers_on_the_files_weights(r1_gguf) -> None:
    path, oracle = r1_gguf
    llm = LLM(str(path), exact=True, num_threads=1, kv_cache_bytes=8 << 20)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    finally:
        llm.shutdown()
    assert [list(o.new_token_ids) for o in outs] == [hf_greedy(oracle, p, 12) for p in PROMPTS]


def test_the_default_serves_the_files_blocks_and_a_row_never_depends_on_its_batch(r1_gguf) -> None:
    from recipe.engine.layers.gguf_linear import GGUFLinear

    path, _ = r1_gguf
    llm = LLM(str(path), num_threads=1, kv_cache_bytes=8 << 20)
    try:
        layer = llm.engine.runner.model.decoder_layers()[0]
        assert isinstance(layer.self_attn.qkv, GGUFLinear) and isinstance(layer.mlp.down, GGUFLinear)
        params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
        together = [list(o.new_token_ids) for o in llm.generate(PROMPTS, params)]
        alone = [list(llm.generate([p], params)[0].new_token_ids) for p in PROMPTS]
    finally:
        llm.shutdown()
    assert together == alone


@pytest.mark.parametrize("qtype_name", ["Q4_K", "Q8_0"])
def test_the_fused_step_reads_one_format_files_and_emits_what_the_layered_step_emits(qtype_name, tmp_path) -> None:
    from gguf import GGMLQuantizationType as T
    from recipe.engine.kernels.fused_llama import FusedLlamaDecoder

    path = write_qwen2_gguf(make_hf_qwen2(12, tied=False), tmp_path / "one.gguf", T[qtype_name])
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    outs = {}
    for backend in ("fused", "layers"):
        llm = LLM(str(path), decode_backend=backend, num_threads=1, kv_cache_bytes=8 << 20)
        try:
            outs[backend] = [list(o.new_token_ids) for o in llm.generate(PROMPTS, params)]
            if backend == "fused":
                assert isinstance(llm.engine.runner.model._fused, FusedLlamaDecoder)
        finally:
            llm.shutdown()
    assert outs["fused"] == outs["layers"]


def test_recipe_serve_names_the_path_at_start_up() -> None:
    from recipe.engine import AsyncLLM
    from recipe.server.backend import EchoBackend
    from recipe.server.cli_serve import engine_compute_path, engine_config_from_args
    from recipe.server.engine_backend import EngineBackend

    from recipe.cli import build_parser

    engine = AsyncLLM("smollm2", num_kv_blocks=16)
    try:
        path = engine_compute_path(EngineBackend(engine))
        assert path is not None and path.startswith("fast path: the GGUF file's own quantised blocks"), path
        assert "dense" not in path, path  # the demo file's linears all run on their blocks
    finally:
        asyncio.run(engine.shutdown())
    assert engine_compute_path(EchoBackend()) is None
    args = build_parser().parse_args(["serve", "--exact"])
    assert EngineConfig.from_kwargs("smollm2", **engine_config_from_args(args)).kernels.weight_format == "dtype"
