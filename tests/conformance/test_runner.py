"""The conformance runner against a correct fake server and against one broken in each known way."""

import fnmatch
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fake_server import ServerThread, create_app

from recipe.cli import main as recipe_main
from recipe.conformance import REGISTRY, run
from recipe.conformance.report import write_html, write_json, write_junit

API_KEY = "test-key-123"  # the key of the fake server in this folder's conftest.py (a second conftest elsewhere shadows `import conftest`)

# fault -> (the check meant to catch it, the family of checks allowed to notice it too)
FAULTS = {
    "missing_index": ("chat.stream.tool_call_index", ["chat.stream.tool_*", "chat.sdk.stream_tools"]),
    "repeated_tool_ids": ("chat.stream.tool_call_identity_once", ["chat.stream.tool_*", "chat.sdk.stream_tools"]),
    "json_for_stream": ("chat.stream.content_type", ["chat.stream.*", "chat.sdk.*", "common.stream_ignores_accept"]),
    "missing_event_lines": ("messages.stream.event_lines", ["messages.stream.*", "messages.sdk.*"]),
    "usage_missing": ("messages.stream.message_delta_usage", ["messages.stream.*", "messages.sdk.*"]),
    "stop_leaked": ("chat.stop.no_leak", ["*stop*"]),
    "error_200": ("errors.chat.invalid_json", ["errors.*", "common.auth.*", "responses.store.unknown_previous"]),
    "wrong_error_shape": ("errors.chat.invalid_json", ["errors.*", "common.auth.*", "responses.store.unknown_previous"]),
}


def test_catalogue_has_at_least_80_checks_with_unique_ids() -> None:
    ids = [c.id for c in REGISTRY]
    assert len(ids) >= 80
    assert len(set(ids)) == len(ids)
    assert {c.api for c in REGISTRY} == {"chat", "messages", "responses", "common"}
    assert sum(c.id.startswith("errors.") for c in REGISTRY) >= 20
    assert all(c.level in ("required", "recommended") and c.sends and c.expects for c in REGISTRY)


def test_correct_server_passes_every_check(good_server: str) -> None:
    report = run(good_server, api_key=API_KEY)
    failed = [(r.id, r.reason) for r in report.results if r.status == "fail"]
    assert failed == []
    skipped = {r.id: r.reason for r in report.results if r.status == "skip"}
    # the fake model does not think: that check must say so, never pass silently
    assert set(skipped) == {"messages.thinking.block"}
    assert "no thinking block" in skipped["messages.thinking.block"]
    assert report.ok


def test_auth_checks_skip_with_a_reason_without_a_key(good_server: str) -> None:
    report = run(good_server, only="common.auth.*")
    assert report.results and all(r.status == "skip" and "--api-key" in r.reason for r in report.results)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_caught_by_its_check_and_no_unrelated_one(fault: str) -> None:
    meant, family = FAULTS[fault]
    with ServerThread(create_app(frozenset({fault}), api_key=API_KEY)) as url:
        report = run(url, api_key=API_KEY)
    failed = {r.id for r in report.results if r.status == "fail"}
    assert meant in failed
    unrelated = {f for f in failed if not any(fnmatch.fnmatch(f, p) for p in family)}
    assert unrelated == set()
    assert not report.ok
    bad = next(r for r in report.results if r.id == meant)
    assert bad.reason and bad.evidence, "a failure carries its reason and evidence"


def test_reports_json_junit_html(good_server: str, tmp_path: Path) -> None:
    with ServerThread(create_app(frozenset({"stop_leaked"}), api_key=API_KEY)) as url:
        report = run(url, api_key=API_KEY, only="stop,models")
    write_json(report, tmp_path / "r.json")
    write_junit(report, tmp_path / "r.xml")
    write_html(report, tmp_path / "r.html")
    data = json.loads((tmp_path / "r.json").read_text())
    assert set(data) >= {"base_url", "started", "summary", "checks"}
    assert set(data["summary"]) == {"total", "passed", "failed", "skipped", "required_failed"}
    assert data["summary"]["failed"] >= 3
    c = data["checks"][0]
    assert set(c) >= {"id", "api", "level", "status", "reason", "evidence"}
    leak = next(c for c in data["checks"] if c["id"] == "chat.stop.no_leak")
    assert leak["status"] == "fail" and leak["evidence"]["status"] == 200 and "request" in leak["evidence"]
    root = ET.parse(tmp_path / "r.xml").getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == data["summary"]["total"]
    assert len(root.findall(".//failure")) == data["summary"]["failed"]
    page = (tmp_path / "r.html").read_text()
    assert "chat.stop.no_leak" in page and "<script src" not in page and "http" not in page.split("<h1>")[0]


def test_cli_exit_status_and_report(good_server: str, tmp_path: Path) -> None:
    out = tmp_path / "ok.json"
    rc = recipe_main(["conformance", "--base-url", good_server + "/v1", "--api-key", API_KEY, "--api", "chat", "--only", "chat.basic", "--report", str(out)])
    assert rc == 0
    assert json.loads(out.read_text())["summary"]["passed"] == 4
    with ServerThread(create_app(frozenset({"missing_event_lines"}), api_key=API_KEY)) as url:
        rc = recipe_main(["conformance", "--base-url", url, "--api-key", API_KEY, "--api", "messages", "--only", "messages.stream"])
    assert rc == 1


def test_unreachable_server_is_one_clear_error_not_125_failures() -> None:
    rc = recipe_main(["conformance", "--base-url", "http://127.0.0.1:9"])
    assert rc == 2
