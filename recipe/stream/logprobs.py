"""Token log probabilities rendered as OpenAI `logprobs.content` entries (`token`, `logprob`, `bytes`, `top_logprobs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recipe.detokenizer import byte_level_alphabet
from recipe.stream.updates import TokenLogprob


class LogprobRenderer:
    """Renders ids + `TokenLogprob`s for one tokenizer; token spellings are cached."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def token(self, token_id: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token_id)
        if hit is not None:
            return hit
        raw = self._tok.id_to_token(token_id)
        dec = byte_level_alphabet()
        if raw is not None and token_id not in self._tok.special_ids and all(c in dec for c in raw):
            data = [dec[c] for c in raw]
            try:
                text = bytes(data).decode("utf-8")
            except UnicodeDecodeError:
                # a token that is not valid UTF-8 on its own is spelled with every byte as a \xNN escape,
                # its valid characters included (the reference's rule)
                text = "".join(f"\\x{b:02x}" for b in data)
        else:
            text = self._tok.decode([token_id])
            data = list(text.encode("utf-8"))
        self._cache[token_id] = (text, data)
        return text, data

    def entries(self, ids: Sequence[int], logprobs: Sequence[TokenLogprob]) -> tuple[dict[str, Any], ...]:
        out = []
        for token_id, lp in zip(ids, logprobs, strict=True):
            text, data = self.token(token_id)
            top = []
            for alt_id, alt_lp in lp.top:
                alt_text, alt_data = self.token(int(alt_id))
                top.append({"token": alt_text, "logprob": float(alt_lp), "bytes": alt_data})
            out.append({"token": text, "logprob": float(lp.logprob), "bytes": data, "top_logprobs": top})
        return tuple(out)
