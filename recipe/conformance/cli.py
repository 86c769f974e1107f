"""`recipe conformance --base-url URL ...`: run the checks, show progress and a summary, write reports."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from recipe.conformance.check import CheckResult
from recipe.conformance.report import write_html, write_json, write_junit
from recipe.conformance.runner import ALL_APIS, ServerUnreachable, run, select


def add_parser(sub: Any) -> None:
    p = sub.add_parser("conformance", help="check an OpenAI-/Anthropic-compatible server, check by check")
    p.add_argument("--base-url", required=True, help="server root, with or without /v1 (e.g. http://127.0.0.1:8000)")
    p.add_argument("--api", default=",".join(ALL_APIS), help="comma list of chat,messages,responses (default all)")
    p.add_argument("--model", help="model to test (default: the first one /v1/models lists)")
    p.add_argument("--api-key", help="the server's key; enables the auth checks")
    p.add_argument("--only", help="only checks whose id matches (substring or glob; comma list)")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds (default 60)")
    p.add_argument("--concurrency", type=int, default=4, help="checks in flight at once (default 4; 1 = one by one)")
    p.add_argument("--report", help="write the JSON report here")
    p.add_argument("--junit", help="write a JUnit XML file here")
    p.add_argument("--html", help="write a self-contained HTML report here")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    apis = [a.strip() for a in args.api.split(",") if a.strip()]
    unknown = set(apis) - set(ALL_APIS)
    if unknown:
        raise SystemExit(f"recipe conformance: unknown --api {sorted(unknown)}; choose from {', '.join(ALL_APIS)}")
    console = Console(stderr=True)
    total = len(select(apis, args.only))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console, transient=True) as bar:
        task = bar.add_task("checking", total=total)

        def advance(r: CheckResult) -> None:
            bar.update(task, advance=1, description=f"{r.status:4} {r.id}")

        try:
            report = run(args.base_url, apis=apis, model=args.model, api_key=args.api_key, only=args.only,
                         timeout_s=args.timeout, concurrency=args.concurrency, on_result=advance)
        except ServerUnreachable as exc:
            console.print(f"[red]recipe conformance: {exc}[/red]")
            return 2
    _print_summary(console, report)
    if args.report:
        write_json(report, args.report)
    if args.junit:
        write_junit(report, args.junit)
    if args.html:
        write_html(report, args.html)
    return 0 if report.ok else 1


def _print_summary(console: Console, report: Any) -> None:
    table = Table(title=f"conformance of {report.base_url}")
    for col in ("api", "passed", "failed", "required failed", "skipped"):
        table.add_column(col)
    for api in sorted({r.api for r in report.results}):
        rs = [r for r in report.results if r.api == api]
        table.add_row(api, str(sum(r.status == "pass" for r in rs)), str(sum(r.status == "fail" for r in rs)),
                      str(sum(r.status == "fail" and r.level == "required" for r in rs)), str(sum(r.status == "skip" for r in rs)))
    console.print(table)
    for r in report.results:
        if r.status == "fail":
            console.print(f"[red]FAIL[/red] {r.id} ({r.level}): {r.reason}")
    s = report.summary
    console.print(f"{s['passed']} passed, {s['failed']} failed ({s['required_failed']} required), {s['skipped']} skipped "
                  f"of {s['total']} in {report.duration_s:.1f} s")
