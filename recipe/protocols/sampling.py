"""Rules every API shares: thinking and effort, sampling values, max_tokens bounds, stop strings.

Numbers are kept as the reference keeps them: temperature and top_p as 32-bit floats.
"""

from __future__ import annotations

from recipe.conversation import ModelVersion, ReasoningEffort
from recipe.errors import conversion_error
from recipe.protocols.body_fields import fail, to_f32, unexpected, unit_variant

EFFORT_VARIANTS = ("none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max")
THINKING_VARIANTS = ("adaptive", "enabled", "disabled")

_EFFORT_MAP: dict[str | None, ReasoningEffort] = {
    None: "high",
    "none": "high",
    "minimal": "low",
    "low": "low",
    "medium": "high",
    "high": "high",
    "xhigh": "xhigh",
    "ultra": "max",
    "max": "max",
}

F32_ONE = 1.0
F32_095 = to_f32(0.95)


def read_effort(value: object) -> str | None:
    """A request effort string (`none` ... `max`); null reads as absent."""
    if value is None:
        return None
    return unit_variant(value, EFFORT_VARIANTS)


def read_thinking(value: object, struct_name: str) -> bool | None:
    """`{"type": adaptive|enabled|disabled, ...}` → on/off; null/absent → None."""
    from recipe.protocols import body_fields as bf

    if value is None:
        return None
    obj = bf.mapping(value, struct_name, 2, lambda v: bf.unit_variant(v, THINKING_VARIANTS))
    kind: str | None = None
    for key, v in obj.items():
        if key == "type":
            kind = bf.unit_variant(v, THINKING_VARIANTS)
        elif key == "budget_tokens":
            bf.opt_unsigned(v, 64)
    if kind is None:
        bf.missing("type")
    return kind != "disabled"


def resolve_thinking(flag: bool | None, effort: str | None, default: bool) -> bool:
    """Thinking on/off: an explicit `thinking` wins; else a given effort decides (`none`: off, any
    other: on); else the server's default."""
    if flag is not None:
        return flag
    if effort is not None:
        return effort != "none"
    return default


def resolve_effort(thinking: bool, effort: str | None) -> ReasoningEffort | None:
    return _EFFORT_MAP[effort] if thinking else None


def check_temperature(t: float | None) -> None:
    if t is not None and not (0.0 <= t <= 2.0):
        raise conversion_error("Invalid temperature value, the valid range of temperature is [0, 2]")


def check_top_p(p: float | None) -> None:
    if p is not None and not (0.0 < p <= 1.0):
        raise conversion_error("Invalid top_p value, the valid range of top_p is (0, 1.0]")


def check_top_logprobs(n: int | None) -> None:
    if n is not None and n > 20:
        raise conversion_error("Invalid top_logprobs value, the valid range of top_logprobs is [0, 20].")


def resolve_sampling(
    version: ModelVersion, thinking: bool, tools_active: bool, temperature: float | None, top_p: float | None
) -> tuple[float, float]:
    """The (temperature, top_p) sent to the backend (codec-spec §1.4)."""
    if version is ModelVersion.V4:
        if thinking:
            return F32_ONE, (F32_095 if tools_active else F32_ONE)
        return (F32_ONE if temperature is None else temperature), (F32_ONE if top_p is None else top_p)
    if thinking:
        return F32_ONE, (F32_ONE if top_p is None else max(top_p, F32_095))
    return (F32_ONE if temperature is None else temperature), F32_ONE


def check_max_tokens(value: int | None, bound: int, *, clamp: bool = False) -> int | None:
    """`[1, bound]`; with `clamp` (Messages) a value above the bound is lowered to it."""
    if value is None:
        return None
    if value < 1 or (value > bound and not clamp):
        raise conversion_error(f"Invalid max_tokens value, the valid range of max_tokens is [1, {bound}]")
    return min(value, bound)


def read_stop(value: object) -> tuple[str, ...] | None:
    """A stop string or list of strings (Chat `stop`, Messages `stop_sequences`)."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, str):
                fail(f"invalid type: {unexpected(item)}, expected a string")
        return tuple(value)
    fail("expected a string or a list")


def check_stop(stop: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """Stop strings as given (a single string or a list); each non-empty, at most 16."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        if not stop:
            raise conversion_error(
                "Invalid 'stop': empty string. Expected a string with minimum length 1, but got an empty string instead."
            )
        return (stop,)
    for i, s in enumerate(stop):
        if s == "":
            raise conversion_error(
                f"Invalid 'stop[{i}]': empty string. Expected a string with minimum length 1, but got an empty string instead."
            )
    if len(stop) > 16:
        raise conversion_error(f"Stop string array too long: {len(stop)}")
    return tuple(stop)
