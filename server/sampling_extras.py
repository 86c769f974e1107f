"""vLLM's extra sampling fields in a request body: `top_k`, `min_p`, `repetition_penalty`, `ignore_eos`.

vLLM's OpenAI-compatible server reads these from Chat Completions bodies beside OpenAI's own fields, and
so does Recipe: they go to the engine unchanged. Messages and Responses bodies carry none of them (the
Messages `top_k` is OpenAI-foreign but Anthropic's own, and conversion already reads it). A field that is
absent or null keeps the engine's default; a field of the wrong type or out of range is a 400 naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from recipe.server.errors import Api, ApiError

_KEYS = (b'"top_k"', b'"min_p"', b'"repetition_penalty"', b'"ignore_eos"')


@dataclass(frozen=True)
class SamplingExtras:
    """The extra fields a request set (None: not set)."""

    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool = False


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"Invalid '{key}': expected a number.", param=key)
    return float(value)


def read_extras(api: Api, body: bytes | dict[str, Any]) -> SamplingExtras:
    """The extras of a Chat body (other APIs: none). Bodies that name none of them are not parsed again."""
    if api != "chat":
        return SamplingExtras()
    if isinstance(body, bytes | bytearray | memoryview):
        raw = bytes(body)
        if not any(key in raw for key in _KEYS):
            return SamplingExtras()
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return SamplingExtras()  # conversion has already refused an invalid body
    else:
        parsed = body
    if not isinstance(parsed, dict):
        return SamplingExtras()
    top_k = parsed.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1):
        raise ApiError(400, "Invalid 'top_k': expected an integer, -1 or 0 for no limit.", param="top_k")
    min_p = _number(parsed, "min_p")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise ApiError(400, f"Invalid 'min_p': {min_p} is not in [0, 1].", param="min_p")
    penalty = _number(parsed, "repetition_penalty")
    if penalty is not None and not penalty > 0.0:
        raise ApiError(400, f"Invalid 'repetition_penalty': {penalty} is not > 0.", param="repetition_penalty")
    ignore_eos = parsed.get("ignore_eos")
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise ApiError(400, "Invalid 'ignore_eos': expected a boolean.", param="ignore_eos")
    return SamplingExtras(top_k=None if top_k in (None, 0, -1) else int(top_k), min_p=min_p,
                          repetition_penalty=penalty, ignore_eos=bool(ignore_eos))
