"""A learned draft head (EAGLE-style) on the target's last hidden state.

Given the target's final hidden state h_t (after its last norm) and the embedding of the token x_{t+1} that
h_t predicted, the head predicts h_{t+1}; the target's own LM head turns it into the next token's logits.
Chained k times it drafts k tokens for the cost of k small MLPs plus k LM-head rows. Weights live in
`weights/<model>_draft_head.safetensors`, written by `scripts/train_draft_head.py`.

A reduced draft vocabulary (FR-Spec, EAGLE-3): with `vocab` (token ids ranked by frequency in the target's
own outputs) the LM head's rows for those tokens alone score the draft, so a draft position costs N / V of
the full projection (SmolLM2's 49,152 x 576 head is ~15x the head's MLP); tokens outside it are never
drafted, which loses nothing, since the target verifies every draft.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

WEIGHTS = Path(__file__).parent / "weights"


class DraftHead(nn.Module):
    def __init__(self, hidden_size: int, inner_size: int, vocab: torch.Tensor | None = None) -> None:
        super().__init__()
        self.vocab = vocab  # int64 token ids the head may draft, most frequent first; None: every token
        self.fuse = nn.Linear(2 * hidden_size, hidden_size)
        self.up = nn.Linear(hidden_size, inner_size)
        self.down = nn.Linear(inner_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, elementwise_affine=True)

    def forward(self, hidden: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        """Predicted next hidden state [..., H] from h_t and e(x_{t+1}) (both [..., H])."""
        x = self.fuse(torch.cat([hidden, token_embedding], dim=-1))
        x = x + self.down(F.silu(self.up(x)))
        return self.norm(x)

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        state = {k: v.detach().to(torch.float16).contiguous() for k, v in self.state_dict().items()}
        if self.vocab is not None:
            state["vocab"] = self.vocab.to(torch.int32).contiguous()
        save_file(state, str(path), metadata={"hidden_size": str(self.up.in_features),
                                              "inner_size": str(self.up.out_features)})

    @classmethod
    def load(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> DraftHead:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            names = set(f.keys())
            vocab = f.get_tensor("vocab").long() if "vocab" in names else None
            head = cls(int(meta["hidden_size"]), int(meta["inner_size"]), vocab)
            head.load_state_dict({k: f.get_tensor(k).to(dtype) for k in names - {"vocab"}})
        return head.to(dtype).eval()


def quantized(head: DraftHead) -> DraftHead:
    """A copy of `head` whose linears hold Q8_0 weights (engine/layers/block_quant_linear.py), for drafting: the fp32
    head reads ~7 MB a draft position as small torch products (SmolLM2's: 0.69 ms; as Q8_0 0.41 ms, this CPU).
    Drafts may differ from the fp32 head's by rounding; outputs never do (the target verifies every draft). A head
    whose widths are not multiples of 32 is returned as it is."""
    import copy

    names = ("fuse", "up", "down")
    copies = [q8_0_copy(getattr(head, name).weight, getattr(head, name).bias) for name in names]
    if any(c is None for c in copies):
        return head
    out = copy.deepcopy(head)
    for name, c in zip(names, copies, strict=True):
        setattr(out, name, c)
    return out


def q8_0_copy(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Module | None:
    """A Q8_0 linear computing `weight` [n, k] (and `bias`), or None where k is not a multiple of its block (32)."""
    from recipe.engine.layers.block_quant_linear import QK, Q8_0Linear

    if weight.shape[1] % QK:
        return None
    return Q8_0Linear(weight.detach().float(), None if bias is None else bias.detach().float())


def lm_weight(model: Any) -> torch.Tensor:
    """The target's LM head as a [V, H] weight (tied to the embedding where it has no head of its own)."""
    if hasattr(model, "embed_tokens"):
        return (model.embed_tokens.weight if model.lm_head is None else model.lm_head.weight).detach()
    return model.head.detach().t()  # the engine tests' tiny model: logits = hidden @ head


class DraftProjection:
    """The head's next token and its probability from a predicted hidden state: the target's LM head, or its
    rows for `vocab` alone (softmax over those; token ids mapped back). `q8_0`: those rows as a Q8_0 copy
    (SmolLM2's 4,096 rows: 0.86 ms fp32, 0.27 ms Q8_0 on this CPU), where the width is a multiple of 32."""

    def __init__(self, model: Any, vocab: torch.Tensor | None, q8_0: bool = False) -> None:
        self.model, self.vocab = model, vocab
        self.weight = None if vocab is None else lm_weight(model)[vocab].float().contiguous()
        self.linear = q8_0_copy(self.weight) if q8_0 and self.weight is not None else None

    def __call__(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.weight is None:
            model_dtype = next(self.model.parameters()).dtype
            return torch.softmax(self.model.compute_logits(hidden.to(model_dtype)).float(), dim=-1).max(dim=-1)
        assert self.vocab is not None
        scores = hidden.float() @ self.weight.t() if self.linear is None else self.linear(hidden.float())
        p, i = torch.softmax(scores, dim=-1).max(dim=-1)
        return p, self.vocab[i]


def frequency_vocab(outputs: list[list[int]], size: int, vocab_size: int) -> torch.Tensor:
    """The `size` token ids most frequent in `outputs` (the target's own generations); the rest by lowest id
    (BPE merge order: earlier merges are the pretraining corpus's more frequent pairs)."""
    counts = torch.bincount(torch.tensor([t for o in outputs for t in o], dtype=torch.int64), minlength=vocab_size)
    ids = torch.arange(vocab_size)
    order = sorted(range(vocab_size), key=lambda t: (-int(counts[t]), t))
    return ids[torch.tensor(order[:size])]


def weights_path(model_name: str) -> Path:
    return WEIGHTS / f"{model_name}_draft_head.safetensors"
