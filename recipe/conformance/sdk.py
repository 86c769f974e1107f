"""Official SDK clients pointed at the server under test (their stream helpers are stricter than raw parsing)."""

from __future__ import annotations

from typing import Any

from recipe.conformance.check import CheckSkipped
from recipe.conformance.session import Session


def openai_client(s: Session) -> Any:
    try:
        import openai
    except ImportError:
        raise CheckSkipped("the openai SDK is not installed (pip install 'recipe-serve[conformance]')") from None
    return openai.OpenAI(base_url=f"{s.base_url}/v1", api_key=s.api_key or "none", max_retries=0, timeout=s.timeout_s)


def anthropic_client(s: Session) -> Any:
    try:
        import anthropic
    except ImportError:
        raise CheckSkipped("the anthropic SDK is not installed (pip install 'recipe-serve[conformance]')") from None
    return anthropic.Anthropic(base_url=s.base_url, api_key=s.api_key or "none", max_retries=0, timeout=s.timeout_s)
