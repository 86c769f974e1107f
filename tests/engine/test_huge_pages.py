"""Weights in transparent huge pages (engine/huge_pages.py, `EngineConfig.huge_pages`): the same values, in one
huge-page-advised mapping, and the same engine outputs as with the weights where loading put them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.engine import LLM, SamplingParams
from recipe.engine.huge_pages import ALIGN, HUGE_PAGE, move_weights_to_huge_pages
from torch import nn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")


def _advised(address: int) -> bool:
    """Whether the mapping holding `address` may get huge pages (smaps' THPeligible), where the kernel says."""
    text = Path("/proc/self/smaps").read_text()
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        lo, hi = (int(x, 16) for x in block.split(" ", 1)[0].split("-"))
        if lo <= address < hi:
            eligible = re.search(r"THPeligible:\s+(\d)", block)
            return eligible is None or eligible.group(1) == "1"
    raise AssertionError("address not mapped")


class _Tied(nn.Module):
    def __init__(self, vocab: int, width: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(vocab, width)
        self.proj = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # one Parameter, two holders
        self.register_buffer("table", torch.randint(-128, 127, (vocab, 3), generator=g, dtype=torch.int8))
        self.register_buffer("view", self.proj.weight.detach()[:2])  # a view: stays where it is
        with torch.no_grad():
            for p in self.parameters():
                p.normal_(generator=g)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.embed(ids)) + self.table[ids].float().sum(-1, keepdim=True)
        return self.head(h)


@settings(max_examples=10, deadline=None)
@given(vocab=st.integers(1, 300), width=st.integers(1, 40), seed=st.integers(0, 10**6))
def test_moved_weights_keep_their_bits_and_share_one_advised_mapping(vocab: int, width: int, seed: int) -> None:
    model = _Tied(vocab, width, seed)
    ids = torch.randint(0, vocab, (7,), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        before = {k: v.clone() for k, v in model.state_dict().items()}
        out = model(ids)
    old = {k: v.data_ptr() for k, v in model.state_dict().items()}
    moved = move_weights_to_huge_pages(model, min_bytes=0)
    state = model.state_dict()
    for k, v in state.items():
        assert torch.equal(v, before[k]), k
    assert model.head.weight is model.embed.weight  # still one Parameter
    assert state["view"].data_ptr() == old["view"]  # shares proj.weight's storage: left in place
    assert state["proj.weight"].data_ptr() == old["proj.weight"]  # a view of it exists: left in place too
    movers = ["embed.weight", "proj.bias", "table"]
    assert moved == sum(before[k].numel() * before[k].element_size() for k in movers)
    ptrs = sorted(state[k].data_ptr() for k in movers)
    assert ptrs[0] % HUGE_PAGE == 0 and all(p % ALIGN == 0 for p in ptrs)
    assert all(p != old[k] for k, p in ((k, state[k].data_ptr()) for k in movers))
    assert ptrs[-1] - ptrs[0] < sum(before[k].numel() * before[k].element_size() + ALIGN for k in movers)
    assert _advised(ptrs[0])
    with torch.no_grad():
        assert torch.equal(model(ids), out)


def test_tensors_below_the_threshold_stay_and_nothing_moves_twice() -> None:
    model = _Tied(50, 8, 0)
    assert move_weights_to_huge_pages(model) == 0  # every tensor is under 64 KiB
    assert move_weights_to_huge_pages(model, min_bytes=0) > 0


@pytest.fixture(scope="module")
def wide_vocab_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama with a wide vocabulary: its embedding and untied head (9,000 x 64 fp32, 2.3 MB) are more
    than a huge page each."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=9000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                                         bos_token_id=1, eos_token_id=2))
    path = tmp_path_factory.mktemp("wide_vocab_llama")
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("decode_backend", ["layers", "fused"])
def test_engine_outputs_equal_with_huge_pages_on_and_off(wide_vocab_llama: Path, decode_backend: str) -> None:
    prompts = [[5, 17, 4242, 99, 3], [8000, 7, 7, 128], [64] * 9]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=2)
    runs = []
    for huge in (False, True):
        llm = LLM(str(wide_vocab_llama), dtype="float32", num_threads=1, num_kv_blocks=32, block_size=4,
                  huge_pages=huge, decode_backend=decode_backend, attention_backend="native",
                  norm_backend="native")
        embed, head = llm.engine.model.embed_tokens.weight, llm.engine.model.lm_head.weight
        # the first large tensor opens one mapping that starts on a huge page; the head is in it, after the
        # embedding and the layers' matrices of 64 KiB and more (or every tensor stays where loading put it)
        inside = 9000 * 64 * 4 <= head.data_ptr() - embed.data_ptr() < 4 * HUGE_PAGE
        assert (embed.data_ptr() % HUGE_PAGE == 0 and inside) == huge
        runs.append(llm.generate(prompts, params))
        llm.shutdown()
    off, on = runs
    assert [o.new_token_ids for o in on] == [o.new_token_ids for o in off]
    assert [o.new_logprobs for o in on] == [o.new_logprobs for o in off]
