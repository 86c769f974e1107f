"""xgrammar backend (optional extra `recipe-serve[xgrammar]`; imports torch, so it is imported lazily).

The tokenizer info is built from the byte view: added tokens blanked so xgrammar classes them as special
(never allowed) — its own HF loader reports 0 special tokens on DeepSeek V4 and lets BOS/PAD into strings.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from recipe.constraints.kinds import ConstraintError
from recipe.constraints.vocabulary import Vocabulary


def _xgr() -> Any:
    try:
        import xgrammar
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConstraintError(f"the xgrammar backend needs the optional extra recipe-serve[xgrammar]: {exc}") from None
    return xgrammar


def xgr_compiler(vocab: Vocabulary) -> Any:
    xgr = _xgr()

    def build() -> Any:
        encoded = [b if b is not None else b"" for b in vocab.token_bytes]
        info = xgr.TokenizerInfo(
            encoded, xgr.VocabType.RAW, vocab_size=vocab.vocab_size, stop_token_ids=list(vocab.eos_token_ids)
        )
        return xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    return vocab.backend_state("xgrammar", build)


class _Matcher:
    __slots__ = ("_m",)

    def __init__(self, m: Any) -> None:
        self._m = m

    def fill(self, out: np.ndarray) -> None:
        self._m.fill_next_token_bitmask(out.reshape(1, -1))

    def accept(self, token_id: int) -> bool:
        return bool(self._m.accept_token(token_id))

    def rollback(self, n: int) -> None:
        self._m.rollback(n)

    def accepting(self) -> bool:
        return bool(self._m.is_completed())


class _Handle:
    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled
        self.size_bytes = int(getattr(compiled, "memory_size_bytes", 0)) or 64 * 1024

    def new_matcher(self) -> _Matcher:
        xgr = _xgr()
        return _Matcher(xgr.GrammarMatcher(self._compiled, terminate_without_stop_token=True))


class XGrammarBackend:
    name = "xgrammar"
    kinds = frozenset({"json_schema", "json_object", "regex", "grammar"})

    def compile(self, kind: str, source: Any, vocab: Vocabulary, *, lenient: bool) -> _Handle:
        compiler = xgr_compiler(vocab)
        try:
            if kind == "json_schema":
                cg = compiler.compile_json_schema(json.dumps(source), strict_mode=False, max_whitespace_cnt=48)
            elif kind == "json_object":
                cg = compiler.compile_json_schema(json.dumps({"type": "object"}), strict_mode=False,
                                                  max_whitespace_cnt=48)
            elif kind == "regex":
                cg = compiler.compile_regex(str(source))
            elif kind == "grammar":
                cg = compiler.compile_grammar(str(source))
            else:
                raise ConstraintError(f"xgrammar does not support constraint kind {kind!r}")
        except ConstraintError:
            raise
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError with its message
            raise ConstraintError(f"xgrammar: {' '.join(str(exc).split())[:2000]}") from None
        return _Handle(cg)
