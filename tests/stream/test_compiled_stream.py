"""The mypyc-compiled stream modules (recipe.compiled_stream) send exactly the bytes of the pure-Python
ones: the same random update sequences (stream_differential's marker-dense outputs, broken markup
included; text split anywhere, token ids in groups of any size or one per update, logprobs, random
vocabulary ids) run in two fresh processes, one per kind of module, and every SSE frame, the complete
response and the error agree."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recipe import compiled_stream

RUNNER = Path(__file__).with_name("stream_runner.py")


def random_cases(rng: random.Random, n: int, differential: Any, tokenizer: Any) -> list[dict[str, Any]]:
    vocab = tokenizer.full.get_vocab_size()
    specials = sorted(getattr(tokenizer, "special_ids", ()) or ())
    cases = []
    for i in range(n):
        case = differential.make_case(rng, i, broken=rng.random() < 0.5)
        upds = differential.updates(case, tokenizer)
        if case["feed"] == "tokens" and not case["logprobs"]:
            ids = [t for u in upds if u["kind"] == "tokens" for t in u["ids"]]
            if rng.random() < 0.2:  # random vocabulary ids: split characters, specials anywhere
                ids = [rng.choice(specials) if specials and rng.random() < 0.1 else rng.randrange(vocab)
                       for _ in range(rng.randint(1, 60))]
            if rng.random() < 0.6:  # one id per update, as an engine streams
                body = [{"kind": "tokens", "ids": [t]} for t in ids]
                upds = [u for u in upds if u["kind"] == "ready"] + body + [u for u in upds if u["kind"] == "finish"]
        cases.append({"case": case, "updates": upds})
    return cases


def run(modules: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, str(RUNNER), modules], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


@pytest.mark.parametrize("seed", [7101, 7102])
def test_compiled_modules_send_the_pure_modules_bytes(seed: int, differential: Any, v4_tokenizer: Any) -> None:
    if compiled_stream.build() is None:
        pytest.skip("no C compiler or mypyc here: only the pure-Python stream modules exist")
    cases = random_cases(random.Random(seed), 150, differential, v4_tokenizer)
    pure, compiled = run("pure", cases), run("compiled", cases)
    assert sum("frames" in r for r in pure) > 100  # most cases stream (a few requests are rejected)
    for case, p, c in zip(cases, pure, compiled, strict=True):
        assert c == p, (case["case"]["case_id"], case["case"]["api"], case["case"]["output"][:80])
        if "frames" in p:
            assert p["logged"] == p["frames"]  # the processor's event log holds what it sent


def test_the_suite_runs_the_compiled_modules_where_built(request: pytest.FixtureRequest) -> None:
    """With a build for the current sources (the suite makes it at start), the tests exercise the compiled
    modules, unless `--pure-stream` asked for the pure ones."""
    import recipe.stream.processor  # noqa: F401

    expected = not request.config.getoption("--pure-stream") and compiled_stream.build_dir().is_dir()
    assert compiled_stream.active() == expected


def test_updates_behave_as_frozen_dataclasses_compiled_or_not() -> None:
    """The update types are compiled too (where built): they still compare, hash, print, copy, pickle,
    `replace` and refuse assignment as frozen dataclasses do."""
    import copy
    import dataclasses
    import pickle

    from recipe.stream import Finish, Ready, TextUpdate, TokenLogprob, TokenUpdate

    lp = TokenLogprob(-0.5, [(3, -1.0)])
    values = [Ready(5, 2, "fp"), TextUpdate("héllo", 2), TokenUpdate([1, 2], [lp, lp]), TokenUpdate((7,)),
              Finish("length"), lp]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.copy(value) == value and copy.deepcopy(value) == value
        assert dataclasses.replace(value) == value and dataclasses.is_dataclass(value)
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.__setattr__(dataclasses.fields(value)[0].name, None)
    assert repr(values[1]) == "TextUpdate(text='héllo', token_count=2)"
    assert hash(TextUpdate("a", 1)) == hash(TextUpdate("a", 1)) and TextUpdate("a", 1) != TextUpdate("a", 2)
    assert TextUpdate(text="x", token_count=3).token_count == 3 and Ready().prompt_tokens == 0


def test_a_build_that_cannot_load_leaves_the_pure_modules(tmp_path: Path) -> None:
    """A build whose code cannot load (here garbage in place of every extension) is not used: the pure
    modules serve instead of an ImportError at `import recipe.stream`."""
    import importlib.machinery

    folder = tmp_path / "build"
    (folder / "recipe" / "stream").mkdir(parents=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in compiled_stream.MODULES:
        (folder / "recipe" / "stream" / f"{name}{suffix}").write_bytes(b"garbage")
    (folder / f"{compiled_stream.GROUP}__mypyc{suffix}").write_bytes(b"garbage")
    code = ("from pathlib import Path\nfrom recipe import compiled_stream as c\n"
            f"c.build_dir = lambda: Path({str(folder)!r})\n"
            "import recipe.stream\nfrom recipe.stream import StreamProcessor\nprint(c.active())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]
