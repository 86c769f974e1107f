"""Run the registered checks against one server and collect a report."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

# Importing the check modules registers their checks.
from recipe.conformance import (  # noqa: F401
    checks_chat,
    checks_chat_stream,
    checks_common,
    checks_errors,
    checks_messages,
    checks_responses,
)
from recipe.conformance.check import REGISTRY, Check, CheckFailed, CheckResult, CheckSkipped
from recipe.conformance.session import Session

ALL_APIS = ("chat", "messages", "responses")


class ServerUnreachable(RuntimeError):
    """Nothing answers at the base URL: no check can say anything about the server."""


@dataclass
class Report:
    base_url: str
    started: str
    duration_s: float
    results: list[CheckResult]

    @property
    def summary(self) -> dict[str, int]:
        by = [r.status for r in self.results]
        return {
            "total": len(by),
            "passed": by.count("pass"),
            "failed": by.count("fail"),
            "skipped": by.count("skip"),
            "required_failed": sum(r.status == "fail" and r.level == "required" for r in self.results),
        }

    @property
    def ok(self) -> bool:
        return self.summary["required_failed"] == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "summary": self.summary,
            "checks": [r.as_dict() for r in self.results],
        }


def select(apis: Iterable[str] = ALL_APIS, only: str | None = None) -> list[Check]:
    """The checks for `apis` (common checks always run), filtered by a glob on the id (`--only`)."""
    wanted = set(apis) | {"common"}
    chosen = [c for c in REGISTRY if c.api in wanted]
    if only:
        patterns = [p.strip() for p in only.split(",") if p.strip()]
        chosen = [c for c in chosen if any(fnmatch.fnmatch(c.id, p if any(ch in p for ch in "*?[") else f"*{p}*") for p in patterns)]
    return chosen


def run_check(c: Check, session: Session) -> CheckResult:
    t0 = time.perf_counter()
    try:
        c.run(session)
        status, reason, evidence = "pass", "", {}
    except CheckFailed as exc:
        status, reason, evidence = "fail", exc.reason, exc.evidence
    except CheckSkipped as exc:
        status, reason, evidence = "skip", exc.reason, exc.evidence
    except httpx.HTTPError as exc:
        status, reason, evidence = "fail", f"transport error: {type(exc).__name__}: {exc}", {}
    except Exception as exc:  # an answer so malformed that the check could not read it
        status, reason, evidence = "fail", f"unreadable answer ({type(exc).__name__}: {exc})", {}
    return CheckResult(c.id, c.api, c.level, status, reason, evidence, time.perf_counter() - t0)  # type: ignore[arg-type]


def run(
    base_url: str,
    *,
    apis: Iterable[str] = ALL_APIS,
    model: str | None = None,
    api_key: str | None = None,
    only: str | None = None,
    timeout_s: float = 60.0,
    concurrency: int = 4,
    on_result: Callable[[CheckResult], None] | None = None,
) -> Report:
    """Run the selected checks, `concurrency` at a time (a batching server answers them together); the
    report keeps registry order, and `on_result` sees each result as it lands."""
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    session = Session(base_url, model=model, api_key=api_key, timeout_s=timeout_s)
    probe = session.get("/v1/models")
    if probe.error is not None:
        session.close()
        raise ServerUnreachable(f"cannot reach {session.base_url}: {probe.error}")
    def one(c: Check) -> CheckResult:
        result = run_check(c, session)
        if on_result:
            on_result(result)
        return result

    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="conformance") as pool:
            results = list(pool.map(one, select(apis, only)))
    finally:
        session.close()
    return Report(base_url, started, time.perf_counter() - t0, results)
