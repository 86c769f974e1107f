"""What a conformance check is, how it reports, and the registry every check module adds to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

import recipe.schemas as schemas
from recipe.conformance.session import Api, Exchange, Session

Level = Literal["required", "recommended"]
Status = Literal["pass", "fail", "skip"]


class CheckFailed(Exception):
    """The server broke the rule; `evidence` says what was sent and what came back."""

    def __init__(self, reason: str, evidence: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence or {}


class CheckSkipped(Exception):
    """The check cannot run against this server (it said it lacks the feature); never a silent pass."""

    def __init__(self, reason: str, evidence: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence or {}


@dataclass(frozen=True)
class Check:
    """One rule: what it sends, what must come back, and the function that tries it."""

    id: str
    api: Api
    level: Level
    sends: str
    expects: str
    run: Callable[[Session], None] = field(repr=False, compare=False)


@dataclass(frozen=True)
class CheckResult:
    id: str
    api: Api
    level: Level
    status: Status
    reason: str
    evidence: dict[str, Any]
    duration_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "api": self.api,
            "level": self.level,
            "status": self.status,
            "reason": self.reason,
            "evidence": self.evidence,
            "duration_s": round(self.duration_s, 4),
        }


REGISTRY: list[Check] = []


def check(id: str, api: Api, level: Level, sends: str, expects: str) -> Callable[[Callable[[Session], None]], Callable[[Session], None]]:
    """Register the decorated function as check `id`."""

    def register(fn: Callable[[Session], None]) -> Callable[[Session], None]:
        assert all(c.id != id for c in REGISTRY), f"duplicate check id {id}"
        REGISTRY.append(Check(id, api, level, sends, expects, fn))
        return fn

    return register


def expect(condition: object, reason: str, ex: Exchange | None = None, **extra: Any) -> None:
    """Fail the running check with `reason` (and the exchange as evidence) unless `condition` holds."""
    if not condition:
        evidence = ex.evidence() if ex is not None else {}
        evidence.update(extra)
        raise CheckFailed(reason, evidence)


def expect_status(ex: Exchange, status: int | tuple[int, ...]) -> None:
    wanted = (status,) if isinstance(status, int) else status
    expect(ex.status in wanted, f"expected HTTP {' or '.join(map(str, wanted))}, got {ex.status or ex.error}", ex)


def expect_json_object(ex: Exchange) -> dict[str, Any]:
    data = ex.json()
    expect(isinstance(data, dict), "response body is not a JSON object", ex)
    assert isinstance(data, dict)
    return data


def ok_json(ex: Exchange) -> dict[str, Any]:
    """The body of a 200 response as a JSON object, or the check fails."""
    expect_status(ex, 200)
    return expect_json_object(ex)


def json_events(ex: Exchange) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data object) of each event of a 200 SSE response, or the check fails."""
    expect_status(ex, 200)
    expect(ex.is_sse, f"content-type {ex.content_type!r}, not text/event-stream", ex)
    out = []
    for ev in ex.events():
        data = parse_json(ev.data, ex, "an event's data")
        expect(isinstance(data, dict), "an event's data is not an object", ex)
        out.append((ev.event, data))
    expect(out, "empty stream", ex)
    return out


def expect_schema(name: str, instance: Any, ex: Exchange | None, what: str = "response") -> None:
    errs = schemas.errors(name, instance)
    expect(not errs, f"{what} does not validate against {name}: {errs[0] if errs else ''}", ex, schema_errors=errs, instance=_short(instance))


def parse_json(text: Any, ex: Exchange | None, what: str) -> Any:
    """`text` parsed as JSON, or the check fails naming `what`."""
    try:
        return orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError):
        raise CheckFailed(f"{what} is not JSON: {str(text)[:200]!r}", ex.evidence() if ex else {}) from None


def skip_if_rejected(ex: Exchange, feature: str) -> None:
    """A 4xx answer to a request that uses an optional feature means the server says it lacks it."""
    if 400 <= ex.status < 500:
        data = ex.json()
        msg = _error_message(data) or ex.body[:200].decode("utf-8", errors="replace")
        raise CheckSkipped(f"server rejected {feature} (HTTP {ex.status}: {msg})", ex.evidence())


def _error_message(data: Any) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        msg = data["error"].get("message")
        return str(msg) if msg is not None else None
    return None


def _short(instance: Any) -> Any:
    text = orjson.dumps(instance, option=orjson.OPT_NON_STR_KEYS, default=str)
    return instance if len(text) <= 1500 else text[:1500].decode("utf-8", errors="replace") + "…"
