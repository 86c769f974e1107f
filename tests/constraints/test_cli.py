"""`recipe constrain check` and `recipe validate`: formats, exit codes, clear errors."""

from __future__ import annotations

import argparse
import json

import pytest

from recipe import cli_constrain, cli_validate


def run(module, argv: list[str], capsys) -> tuple[int, list[dict], str]:
    parser = argparse.ArgumentParser(prog="recipe")
    module.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    rc = args.func(args)
    cap = capsys.readouterr()
    return rc, [json.loads(line) for line in cap.out.splitlines() if line.strip()], cap.err


def test_constrain_check_schema(tmp_path, capsys) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}},
                                  "required": ["n"]}))
    inst = tmp_path / "i.jsonl"
    inst.write_text('{"n": 3}\n{"n": 9}\n"text"\n\n{"n": 5.0}\n')
    rc, lines, _ = run(cli_constrain, ["constrain", "check", "--schema", str(schema), str(inst)], capsys)
    assert rc == 0
    assert lines == [{"index": 0, "accepted": True}, {"index": 1, "accepted": False},
                     {"index": 2, "accepted": False}, {"index": 3, "accepted": True}]


def test_constrain_check_regex_and_json_object(tmp_path, capsys) -> None:
    inst = tmp_path / "i.jsonl"
    inst.write_text('"2025-01-17"\n"2025-1-17"\n7\n')
    rc, lines, _ = run(cli_constrain, ["constrain", "check", "--regex", r"\d{4}-\d{2}-\d{2}", str(inst)], capsys)
    assert rc == 0 and [x["accepted"] for x in lines] == [True, False, False]
    inst.write_text('{"a": [1, {"b": null}]}\n[1]\n')
    rc, lines, _ = run(cli_constrain, ["constrain", "check", "--json-object", "--backend", "xgrammar", str(inst)],
                    capsys)
    assert [x["accepted"] for x in lines] == [True, False]


def test_constrain_check_compile_failure_is_one_line(tmp_path, capsys) -> None:
    inst = tmp_path / "i.jsonl"
    inst.write_text('"a"\n')
    rc, lines, _ = run(cli_constrain, ["constrain", "check", "--regex", "(a", str(inst)], capsys)
    assert rc == 0 and len(lines) == 1 and lines[0]["compiled"] is False and lines[0]["error"]


def test_constrain_check_bad_files(tmp_path, capsys) -> None:
    inst = tmp_path / "i.jsonl"
    inst.write_text("{broken\n")
    rc, _, err = run(cli_constrain, ["constrain", "check", "--json-object", str(inst)], capsys)
    assert rc == 2 and "not JSON" in err
    rc, _, _ = run(cli_constrain, ["constrain", "check", "--json-object", str(tmp_path / "missing")], capsys)
    assert rc == 2


def test_validate_report_and_outputs(tmp_path, capsys) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "array", "items": {"type": "integer"}, "uniqueItems": True,
                                  "dependentRequired": {"a": ["b"]}}))
    rc, lines, _ = run(cli_validate, ["validate", "--schema", str(schema)], capsys)
    report = lines[0]["report"]
    assert rc == 0 and report["enforced_exactly"] is False
    assert report["post_checked"] == ["uniqueItems"]
    assert {"type", "items", "dependentRequired"} <= set(report["exact"])
    outs = tmp_path / "o.jsonl"
    outs.write_text('"[1, 2]"\n"[1, 1]"\n[3]\n"not json"\n')
    rc, lines, _ = run(cli_validate, ["validate", "--schema", str(schema), str(outs)], capsys)
    assert rc == 1
    assert [x["valid"] for x in lines[1:]] == [True, False, True, False]
    assert "non-unique" in lines[2]["errors"][0]


@pytest.mark.parametrize("content", ["{", "[1]"])
def test_validate_bad_schema(tmp_path, capsys, content) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(content)
    rc, _, err = run(cli_validate, ["validate", "--schema", str(schema)], capsys)
    assert rc == 2 and "recipe validate:" in err
