"""DeepSeek-V4 multi-token-prediction layers: loaded exactly from the release layout (`mtp.0.*`), and their
forward equals the published formula computed independently:

    x = e_proj(enorm(embed(token[p+1]))) + h_proj(hnorm(streams[p]))   (streams: the main model's final
                                                                       hyper-connection streams, from transformers)
    logits[p+2] = lm_head(norm(hc_head(block(x))))

with the block, its hc_head and norm run by `transformers` (a one-layer DeepseekV4 holding the MTP layer's
block, fed `x` in place of its embedding streams) and the main model's LM head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from recipe.engine.layers.v4_kv import V4Plan, V4Span
from recipe.engine.models.deepseek_v4 import DeepseekV4ForCausalLM
from recipe.engine.models.deepseek_v4_mtp import DeepseekV4MTP
from recipe.engine.models.weights import CheckpointError
from safetensors.torch import load_file, save_file
from v4_checkpoints import V4_TINY, add_mtp_layer, load_engine_v4, mtp_block_model, write_v4_checkpoint

ATOL = 1e-4
LENGTH = 26  # past the window (8) and several compression boundaries of the main model
BS = 4


@pytest.fixture(scope="module")
def mtp_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    path = write_v4_checkpoint(tmp_path_factory.mktemp("v4_mtp"), "mixed")
    return path, add_mtp_layer(path, seed=1)


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


@pytest.fixture(scope="module")
def oracle(mtp_dir: tuple[Path, dict[str, torch.Tensor]]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """(token ids, transformers' final streams [LENGTH, hc, D], the formula's MTP logits [LENGTH - 1, V] with
    token[p+1] teacher-forced)."""
    from transformers import DeepseekV4ForCausalLM as HFModel

    path, mtp = mtp_dir
    ids = torch.randint(2, V4_TINY["vocab_size"], (LENGTH,), generator=torch.Generator().manual_seed(5)).tolist()
    hf = HFModel.from_pretrained(path, dtype=torch.float32).eval()
    seen: dict[str, torch.Tensor] = {}
    hook = hf.model.hc_head.register_forward_pre_hook(lambda _m, args: seen.update(streams=args[0]))
    with torch.no_grad():
        hf(input_ids=torch.tensor([ids]))
    hook.remove()
    streams = seen["streams"][0]
    nxt = torch.tensor(ids[1:])
    with torch.no_grad():
        e = rms(hf.model.embed_tokens(nxt), mtp["mtp.0.enorm.weight"])
        h = rms(streams[:-1], mtp["mtp.0.hnorm.weight"])
        x = (e @ mtp["mtp.0.e_proj.weight"].t()).unsqueeze(1) + h @ mtp["mtp.0.h_proj.weight"].t()
        block = mtp_block_model(seed=1)  # the same random draw add_mtp_layer wrote
        block.lm_head.weight.copy_(hf.lm_head.weight)

        def feed_x(_m: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            return (x.unsqueeze(0), *args[1:]), kwargs

        hook = block.model.layers[0].register_forward_pre_hook(feed_x, with_kwargs=True)
        logits = block(input_ids=nxt.unsqueeze(0)).logits[0]
        hook.remove()
    return ids, streams, logits


def run_engine(model: DeepseekV4ForCausalLM, ids: list[int], chunks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Main forward chunk by chunk, each followed by the MTP layer over the chunk's positions (the last
    position has no next token): -> (main final streams [LENGTH, hc, D], MTP logits [LENGTH - 1, V])."""
    tables = {s.name: torch.arange(8 * i, 8 * i + 8) for i, s in enumerate(model.cache_specs())}
    streams, logits, p0 = [], [], 0
    with torch.inference_mode():
        for n in chunks:
            plan = V4Plan((V4Span(0, n, p0, tables),), BS)
            model(torch.tensor(ids[p0 : p0 + n]), torch.arange(p0, p0 + n), plan)
            assert model.last_streams is not None
            streams.append(model.last_streams)
            m = min(n, len(ids) - 1 - p0)
            if m == 0:
                break
            mtp_plan = V4Plan((V4Span(0, m, p0, tables),), BS)
            out, _ = model.mtp_forward(model.last_streams[:m], torch.tensor(ids[p0 + 1 : p0 + 1 + m], dtype=torch.long),
                                       torch.arange(p0, p0 + m), mtp_plan)
            logits.append(out)
            p0 += n
    return torch.cat(streams), torch.cat(logits)


@pytest.mark.parametrize("chunks", [[LENGTH], [5, 1, 1, 7, 12], [1] * LENGTH])
def test_mtp_forward_equals_the_published_formula(mtp_dir: tuple[Path, dict[str, torch.Tensor]],
                                                  oracle: tuple[list[int], torch.Tensor, torch.Tensor],
                                                  chunks: list[int]) -> None:
    """Whole, chunked and token-by-token: the MTP layer's attention reads its own earlier cache rows."""
    ids, ref_streams, ref_logits = oracle
    model = load_engine_v4(mtp_dir[0], num_blocks=64, block_size=BS)
    streams, logits = run_engine(model, ids, chunks)
    assert torch.allclose(streams, ref_streams, atol=ATOL, rtol=0), f"{(streams - ref_streams).abs().max():.2e}"
    assert torch.allclose(logits, ref_logits, atol=ATOL, rtol=0), f"{(logits - ref_logits).abs().max():.2e}"
    assert float(ref_logits.std()) > 0.3, "logits too flat to prove anything"


def test_mtp_attention_uses_its_history(mtp_dir: tuple[Path, dict[str, torch.Tensor]],
                                        oracle: tuple[list[int], torch.Tensor, torch.Tensor]) -> None:
    """The last position's MTP logits change when the earlier MTP rows are not there (so the equality above
    proves the cached path, not a history-free one)."""
    ids, _, ref_logits = oracle
    model = load_engine_v4(mtp_dir[0], num_blocks=64, block_size=BS)
    streams, _ = run_engine(model, ids, [LENGTH])
    fresh = load_engine_v4(mtp_dir[0], num_blocks=64, block_size=BS)
    tables = {s.name: torch.arange(8 * i, 8 * i + 8) for i, s in enumerate(fresh.cache_specs())}
    p = LENGTH - 2
    with torch.inference_mode():
        alone, _ = fresh.mtp_forward(streams[p : p + 1], torch.tensor([ids[p + 1]]), torch.tensor([p]),
                                     V4Plan((V4Span(0, 1, p, tables),), BS))
    assert (alone[0] - ref_logits[p]).abs().max() > 1e-2


def test_mtp_weights_round_trip(mtp_dir: tuple[Path, dict[str, torch.Tensor]]) -> None:
    path, written = mtp_dir
    model = load_engine_v4(path, num_blocks=64, block_size=BS)
    assert len(model.mtp) == 1
    mtp = model.mtp[0]
    assert isinstance(mtp, DeepseekV4MTP)
    for name, param in (("enorm.weight", mtp.enorm.weight), ("hnorm.weight", mtp.hnorm.weight),
                        ("e_proj.weight", mtp.e_proj.weight), ("h_proj.weight", mtp.h_proj.weight),
                        ("norm.weight", mtp.norm.weight), ("hc_head_fn", mtp.hc_head.hc_fn),
                        ("hc_head_base", mtp.hc_head.hc_base), ("hc_head_scale", mtp.hc_head.hc_scale),
                        ("attn.wq_a.weight", mtp.block.self_attn.q_a_proj.weight),
                        ("attn.attn_sink", mtp.block.self_attn.sinks), ("hc_ffn_fn", mtp.block.ffn_hc.fn),
                        ("ffn.gate.bias", mtp.block.mlp.gate.e_score_correction_bias),
                        ("ffn.shared_experts.w2.weight", mtp.block.mlp.shared_down.weight)):
        assert torch.equal(param, written["mtp.0." + name]), name
    for e in range(V4_TINY["n_routed_experts"]):
        w13 = torch.cat([written[f"mtp.0.ffn.experts.{e}.w1.weight"], written[f"mtp.0.ffn.experts.{e}.w3.weight"]])
        assert torch.equal(mtp.block.mlp.w_gate_up[e], w13)
        assert torch.equal(mtp.block.mlp.w_down[e], written[f"mtp.0.ffn.experts.{e}.w2.weight"])
    held = [*mtp.parameters(), *mtp.buffers()]  # the score-correction bias is a buffer
    assert sum(p.numel() for p in held) == sum(t.numel() for t in written.values())
    # the MTP block keeps window rows next to the decoder layers'
    width = {s.name: s.row_width for s in model.cache_specs()}["window"]
    assert width == sum(layer.self_attn.window_row_width for layer in model.cache_layers())
    assert mtp.block.self_attn.window_rows is not None


def test_a_checkpoint_without_mtp_tensors_loads_without_mtp_layers(tmp_path: Path) -> None:
    """`transformers` writes num_nextn_predict_layers (default 1) but never the layers: nothing to load."""
    path = write_v4_checkpoint(tmp_path, "mixed")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    model = load_engine_v4(path)
    assert len(model.mtp) == 0 and model.cache_layers() == model.decoder_layers()
    with torch.inference_mode():
        tables = {s.name: torch.arange(8) for s in model.cache_specs()}
        model(torch.tensor([3, 4]), torch.arange(2), V4Plan((V4Span(0, 2, 0, tables),), 4))
    assert model.last_streams is None


def test_incomplete_or_unexpected_mtp_tensors_are_refused(mtp_dir: tuple[Path, dict[str, torch.Tensor]],
                                                          tmp_path: Path) -> None:
    path, _ = mtp_dir
    tensors = load_file(str(path / "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({k: v for k, v in tensors.items() if k != "mtp.0.h_proj.weight"}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"mtp\.0\.h_proj\.weight"):
        load_engine_v4(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 0}))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="num_nextn_predict_layers is 0"):
        load_engine_v4(tmp_path)
