"""Conversion options: the server's choices that shape how a request body becomes a conversation."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from recipe.conversation import ModelVersion

WebSearchBehavior = Literal["drop", "reject"]
ReasoningContentBehavior = Literal["fill_empty", "reject"]

DEFAULT_MAX_TOKENS_UPPER_BOUND = 393216


def default_model_versions() -> dict[str, ModelVersion]:
    return {"DeepSeek-V4-Pro": ModelVersion.V4, "DeepSeek-V4.1-Flash": ModelVersion.V41}


@dataclass(frozen=True)
class ConversionOptions:
    """How requests convert; with `strict_reference=True` the options equal the reference's `ConversionOptions()`.

    `strict_reference` False (the default) accepts what real clients send and the reference rejects or
    ignores (see `recipe.protocols.leniency`); every body outside those rules converts exactly as in
    the reference either way.

    `model_versions_by_name` lists every accepted `model` string (exact, case-sensitive) and the
    prompt rules it converts under; add aliases with `with_model_alias` (a server may map its own
    model names, e.g. a ChatML demo model, onto a version's conversion rules).
    """

    default_thinking_mode: bool = True
    model_versions_by_name: dict[str, ModelVersion] = field(default_factory=default_model_versions)
    thinking_max_tokens_upper_bound: int = DEFAULT_MAX_TOKENS_UPPER_BOUND
    non_thinking_max_tokens_upper_bound: int = DEFAULT_MAX_TOKENS_UPPER_BOUND
    reasoning_content_behavior: ReasoningContentBehavior = "fill_empty"
    responses_web_search: WebSearchBehavior = "drop"
    messages_web_search: WebSearchBehavior = "reject"
    # Beyond the reference: the largest accepted Chat `n` (the reference accepts only 1).
    max_n: int = 16
    # The reference's behaviour for the fields `recipe.protocols.leniency` lists (False: accept them).
    strict_reference: bool = False

    def with_model_alias(self, name: str, version: ModelVersion) -> ConversionOptions:
        """Accept `name` as a model of `version` (adds it, or replaces its version)."""
        table = dict(self.model_versions_by_name)
        table[name] = version
        return replace(self, model_versions_by_name=table)

    def max_tokens_upper_bound(self, thinking: bool) -> int:
        return self.thinking_max_tokens_upper_bound if thinking else self.non_thinking_max_tokens_upper_bound

    def __hash__(self) -> int:
        return id(self)
