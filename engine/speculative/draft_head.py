"""A learned draft head (EAGLE-style) on the target's last hidden state.

Given the target's final hidden state h_t (after its last norm) and the embedding of the token x_{t+1} that
h_t predicted, the head predicts h_{t+1}; the target's own LM head turns it into the next token's logits.
Chained k times it drafts k tokens for the cost of k small MLPs plus k LM-head rows. Weights live in
`weights/<model>_draft_head.safetensors`, written by `scripts/train_draft_head.py`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

WEIGHTS = Path(__file__).parent / "weights"


class DraftHead(nn.Module):
    def __init__(self, hidden_size: int, inner_size: int) -> None:
        super().__init__()
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
        save_file(state, str(path), metadata={"hidden_size": str(self.up.in_features),
                                              "inner_size": str(self.up.out_features)})

    @classmethod
    def load(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> DraftHead:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            head = cls(int(meta["hidden_size"]), int(meta["inner_size"]))
            head.load_state_dict({k: f.get_tensor(k).to(dtype) for k in f.keys()})  # noqa: SIM118
        return head.to(dtype).eval()


def weights_path(model_name: str) -> Path:
    return WEIGHTS / f"{model_name}_draft_head.safetensors"
