"""A request's session key: which conversation it continues, for the sliding-window session cache.

Spelled as OpenAI spells its prompt-cache routing hint: the top-level `prompt_cache_key` string of a Chat
Completions or Responses body. Anthropic's Messages API has no such field; there it is read from
`metadata.prompt_cache_key` (Recipe reads `metadata.kv_retention` the same way). It reaches the engine as
`SamplingParams.session_key`: the session cache supersedes a session's older window states with its newest,
and the disaggregated router keeps a session on one worker. It never changes an output. A key that is not
a string of 1 to 256 characters is a 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recipe.server.body_field import body_field
from recipe.server.errors import Api, ApiError

FIELD = "prompt_cache_key"
MAX_CHARS = 256


def session_key(api: Api, body: bytes | Mapping[str, Any]) -> str | None:
    """The session key of a request body (None if it sets none)."""
    value = body_field(body, FIELD, under="metadata" if api == "messages" else None)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_CHARS:
        param = f"metadata.{FIELD}" if api == "messages" else FIELD
        raise ApiError(400, f"Invalid '{param}': expected a string of 1 to {MAX_CHARS} characters.", param=param)
    return value
