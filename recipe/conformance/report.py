"""Report writers: JSON (the documented shape), JUnit XML (one test case per check), one self-contained HTML page."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson

from recipe.conformance.runner import Report


def write_json(report: Report, path: str | Path) -> None:
    Path(path).write_bytes(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2, default=str))


def write_junit(report: Report, path: str | Path) -> None:
    s = report.summary
    suites = ET.Element("testsuites", name="recipe conformance", tests=str(s["total"]), failures=str(s["failed"]), skipped=str(s["skipped"]))
    for api in sorted({r.api for r in report.results}):
        rs = [r for r in report.results if r.api == api]
        suite = ET.SubElement(
            suites, "testsuite", name=api, tests=str(len(rs)),
            failures=str(sum(r.status == "fail" for r in rs)), skipped=str(sum(r.status == "skip" for r in rs)),
            time=f"{sum(r.duration_s for r in rs):.3f}",
        )
        for r in rs:
            case = ET.SubElement(suite, "testcase", classname=f"conformance.{api}.{r.level}", name=r.id, time=f"{r.duration_s:.3f}")
            if r.status == "fail":
                node = ET.SubElement(case, "failure", message=r.reason, type=r.level)
                node.text = orjson.dumps(r.evidence, option=orjson.OPT_INDENT_2, default=str).decode()
            elif r.status == "skip":
                ET.SubElement(case, "skipped", message=r.reason)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
.pass{color:#176117}.fail{color:#b00020;font-weight:600}.skip{color:#8a6d00}
pre{white-space:pre-wrap;max-height:20em;overflow:auto;background:#f6f6f6;padding:6px;margin:4px 0}
"""


def write_html(report: Report, path: str | Path) -> None:
    s = report.summary
    rows = []
    for r in report.results:
        ev = orjson.dumps(r.evidence, option=orjson.OPT_INDENT_2, default=str).decode() if r.evidence else ""
        rows.append(
            f"<tr><td><code>{html.escape(r.id)}</code></td><td>{r.api}</td><td>{r.level}</td>"
            f"<td class='{r.status}'>{r.status}</td><td>{html.escape(r.reason)}"
            + (f"<details><summary>evidence</summary><pre>{html.escape(ev)}</pre></details>" if ev else "")
            + "</td></tr>"
        )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Conformance report</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>Conformance of {html.escape(report.base_url)}</h1>"
        f"<p>Started {html.escape(report.started)}, {report.duration_s:.1f} s. "
        f"{s['passed']} passed, {s['failed']} failed ({s['required_failed']} required), {s['skipped']} skipped of {s['total']}.</p>"
        "<table><tr><th>check</th><th>api</th><th>level</th><th>status</th><th>reason</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )
    Path(path).write_text(page, encoding="utf-8")
