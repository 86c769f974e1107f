"""`recipe encode`: one JSON object per request, errors in the called API's shape, --jsonl exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recipe.cli import main

GOOD = {"model": "DeepSeek-V4-Pro", "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "Hi"}]}


def run(capsys: Any, tmp_path: Path, api: str, text: str, *flags: str) -> tuple[int, list[dict[str, Any]]]:
    path = tmp_path / "in.json"
    path.write_text(text, encoding="utf-8")
    rc = main(["encode", "--api", api, *flags, str(path)])
    out = capsys.readouterr().out
    return rc, [json.loads(line) for line in out.splitlines()]


def test_single_request_prints_prompt_ranges_and_ids(capsys: Any, tmp_path: Path) -> None:
    rc, [obj] = run(capsys, tmp_path, "chat", json.dumps(GOOD))
    assert rc == 0
    # codec-spec §3.3, first row
    assert obj == {
        "model_version": "DeepseekV4Pro",
        "prompt": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>",
        "special_ranges": [[0, 21], [21, 29], [31, 44], [44, 52]],
        "token_ids": [0, 128803, 23166, 128804, 128822],
    }


def test_single_failing_request_exits_1_with_the_error_body(capsys: Any, tmp_path: Path) -> None:
    rc, [obj] = run(capsys, tmp_path, "messages", json.dumps({"model": "DeepSeek-V4-Pro", "messages": []}))
    assert rc == 1
    assert obj == {
        "error": {
            "status": 400,
            "body": {"type": "error", "error": {"type": "invalid_request_error", "message": "messages: at least one message is required"}},
        }
    }


def test_jsonl_reports_each_line_and_exits_0(capsys: Any, tmp_path: Path) -> None:
    v41 = {"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]}
    lines = [json.dumps(GOOD), "", "not json", json.dumps(v41)]
    rc, objs = run(capsys, tmp_path, "chat", "\n".join(lines) + "\n", "--jsonl")
    assert rc == 0 and len(objs) == 3
    assert objs[0]["token_ids"] == [0, 128803, 23166, 128804, 128822]
    assert objs[1]["error"]["body"]["error"]["message"] == "invalid JSON request: expected ident at line 1 column 2"
    # the V4 tokenizer has no <｜System｜>: the prompt is given, the ids are not, and the reason is named
    assert objs[2]["model_version"] == "DeepseekV41Flash" and objs[2]["token_ids"] is None
    assert "<｜System｜>" in objs[2]["token_ids_error"]


def test_no_ids_and_unreadable_input(capsys: Any, tmp_path: Path) -> None:
    rc, [obj] = run(capsys, tmp_path, "chat", json.dumps(GOOD), "--no-ids")
    assert rc == 0 and obj["token_ids"] is None and "token_ids_error" not in obj
    assert main(["encode", "--api", "chat", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_unknown_api_is_rejected_by_the_parser(capsys: Any) -> None:
    with pytest.raises(SystemExit) as info:
        main(["encode", "--api", "completions", "-"])
    assert info.value.code == 2
