"""`recipe conformance`: check any OpenAI-/Anthropic-compatible server, check by check, with evidence."""

from recipe.conformance.check import REGISTRY, Check, CheckResult
from recipe.conformance.runner import Report, run

__all__ = ["REGISTRY", "Check", "CheckResult", "Report", "run"]
