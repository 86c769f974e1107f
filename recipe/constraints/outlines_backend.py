"""outlines-core backend: regex DFA index over the byte view (added tokens left out, EOS outside the map).

`Vocabulary.from_pretrained` fails on DeepSeek V4 (ids 0-2 are not byte-level spellings), so the map is
built here. Index builds can be slow and large (see structured-output.md §5); the caller's timeout and
size limits apply. JSON Schema goes through outlines' schema-to-regex translation.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np

from recipe.constraints.kinds import ConstraintError
from recipe.constraints.vocabulary import Vocabulary

# whitespace between JSON tokens: as the other backends' compact/pretty output, newlines allowed
_WS = r"[ \n]{0,4}"


def outlines_vocabulary(vocab: Vocabulary) -> Any:
    from outlines_core import Vocabulary as OVocabulary

    def build() -> Any:
        by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b:
                by_bytes.setdefault(b, []).append(i)
        return OVocabulary(vocab.eos_token_ids[0], by_bytes)

    return vocab.backend_state("outlines", build)


class _Matcher:
    __slots__ = ("_g",)

    def __init__(self, g: Any) -> None:
        self._g = g

    def fill(self, out: np.ndarray) -> None:
        self._g.write_mask_into(out.ctypes.data, out.size, 4)

    def accept(self, token_id: int) -> bool:
        try:
            self._g.advance(token_id, return_tokens=False)
        except ValueError:
            return False
        return True

    def rollback(self, n: int) -> None:
        self._g.rollback_state(n)

    def accepting(self) -> bool:
        return bool(self._g.is_finished())


class _Handle:
    def __init__(self, index: Any) -> None:
        self._index = index
        self.size_bytes = len(pickle.dumps(index))

    def new_matcher(self) -> _Matcher:
        from outlines_core import Guide

        return _Matcher(Guide(self._index, max_rollback=1 << 16))


class OutlinesBackend:
    name = "outlines"
    kinds = frozenset({"json_schema", "json_object", "regex"})

    def compile(self, kind: str, source: Any, vocab: Vocabulary, *, lenient: bool) -> _Handle:
        from outlines_core import Index
        from outlines_core.json_schema import build_regex_from_schema

        try:
            if kind == "json_schema":
                regex = build_regex_from_schema(json.dumps(source), whitespace_pattern=_WS)
            elif kind == "json_object":
                regex = build_regex_from_schema(json.dumps({"type": "object"}), whitespace_pattern=_WS)
            elif kind == "regex":
                regex = str(source)
            else:
                raise ConstraintError(f"outlines does not support constraint kind {kind!r}")
            index = Index(regex, outlines_vocabulary(vocab))
        except ConstraintError:
            raise
        except (ValueError, TypeError, RuntimeError) as exc:
            raise ConstraintError(f"outlines: {' '.join(str(exc).split())[:2000]}") from None
        return _Handle(index)
