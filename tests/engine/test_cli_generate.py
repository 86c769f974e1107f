"""`recipe generate` end to end on a tiny checkpoint: JSONL in, JSONL out equal to `LLM.generate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from recipe.engine import LLM, SamplingParams

from recipe.cli import main


def test_generate_writes_one_line_per_choice_equal_to_llm_generate(llama_checkpoint: Path, tmp_path: Path) -> None:
    batch = tmp_path / "in.jsonl"
    lines = [
        {"id": "a", "prompt_ids": [5, 6, 7, 8, 9], "max_tokens": 6, "temperature": 0},
        {"prompt_ids": [10, 11, 12], "n": 2, "seed": 3, "max_tokens": 4, "logprobs": 2},
    ]
    batch.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n\n")
    out = tmp_path / "out.jsonl"
    rc = main(["generate", str(batch), "-o", str(out), "--model", str(llama_checkpoint), "--threads", "1",
               "--no-progress", "--temperature", "0.7"])
    assert rc == 0
    records = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert [(r["id"], r["index"]) for r in records] == [("a", 0), ("2", 0), ("2", 1)]
    llm = LLM(str(llama_checkpoint), num_threads=1)
    expected = llm.generate([[5, 6, 7, 8, 9], [10, 11, 12]], [
        SamplingParams(temperature=0.0, max_tokens=6),
        SamplingParams(temperature=0.7, seed=3, n=2, max_tokens=4, logprobs=2)])
    assert [r["output_ids"] for r in records] == [list(o.new_token_ids) for o in expected]
    assert [r["finish_reason"] for r in records] == [o.finish_reason for o in expected]
    assert all(len(r["logprobs"]) == len(r["output_ids"]) for r in records[1:])
    assert records[0]["prompt_tokens"] == 5 and records[0]["ttft_s"] > 0


@pytest.mark.parametrize("flag", [[], ["--step-threads", "off"]])
def test_step_threads_default_to_the_profile_and_leave_greedy_tokens_unchanged(
        llama_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: list[str]) -> None:
    import recipe.engine

    built: list[LLM] = []

    def llm(*args: Any, **kwargs: Any) -> LLM:
        built.append(LLM(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(recipe.engine, "LLM", llm)
    batch = tmp_path / "in.jsonl"
    batch.write_bytes(orjson.dumps({"prompt_ids": [5, 6, 7, 8, 9], "max_tokens": 8, "temperature": 0}) + b"\n")
    out = tmp_path / "out.jsonl"
    assert main(["generate", str(batch), "-o", str(out), "--model", str(llama_checkpoint), "--threads", "2",
                 "--no-progress", *flag]) == 0
    assert built[0].engine.config.kernels.step_threads == ("off" if flag else "auto")
    assert (built[0].engine.runner.step_threads is None) == bool(flag)  # the profile ran only with auto
    plain = LLM(str(llama_checkpoint), num_threads=2)
    expected = plain.generate([[5, 6, 7, 8, 9]], SamplingParams(temperature=0.0, max_tokens=8))
    plain.shutdown()
    assert orjson.loads(out.read_bytes())["output_ids"] == list(expected[0].new_token_ids)


@pytest.mark.parametrize(("line", "message"), [
    (b'{"prompt_ids": [1, 2], "temperature": "hot"}', "line 1: 'temperature' must be float"),
    (b'{"prompt_ids": [1, 2], "colour": 1}', "line 1: unknown field(s) ['colour']"),
    (b'{"max_tokens": 3}', "line 1: give exactly one of"),
    (b'{"prompt_ids": [1, 2], "top_p": 0}', "line 1: top_p must be in (0, 1]"),
    (b'[1, 2]', "line 1: expected a JSON object"),
    (b'{"prompt_ids": [1, 2]', "line 1:"),
])
def test_bad_lines_get_a_clear_error_before_any_generation(tmp_path: Path, line: bytes, message: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    batch = tmp_path / "in.jsonl"
    batch.write_bytes(line + b"\n")
    assert main(["generate", str(batch), "--model", "does-not-matter", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_out_of_vocabulary_ids_are_named(llama_checkpoint: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    batch = tmp_path / "in.jsonl"
    batch.write_bytes(b'{"id": "x", "prompt_ids": [1, 99999]}\n')
    assert main(["generate", str(batch), "--model", str(llama_checkpoint), "--threads", "1", "--no-progress"]) == 2
    assert "request x: prompt token ids must be ints in [0, 256)" in capsys.readouterr().err
