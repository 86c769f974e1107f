"""Every command in the README's and docs/'s fenced `bash` blocks runs as written, as far as a fast test can tell.

Each line of a `bash` block is split as the shell splits it, then checked by its program:
- `recipe …` / `.venv/bin/recipe …`: parsed by the real `recipe` argument parser, and every `--flag` must be a
  flag of that sub-command spelt in full (argparse would accept an abbreviation; a doc should not);
  `encode`, `validate` and `constrain` are cheap, so they are run, on the files the docs ship;
- `python X.py …`: X exists, and every `--flag` is one its `add_argument` calls define (read from the source,
  so no script is imported or run); `python -m pytest PATH`: PATH exists; `python -m MODULE`: it resolves;
- `bash scripts/X.sh`: the script exists (`serve.sh` passes its arguments to `recipe serve`: checked as such);
- `pip install -e ".[extras]"`: each extra is declared in pyproject.toml; `curl -d BODY`: BODY is JSON;
- any argument that names a path under the repository's input folders must exist, and an output file's folder
  must exist on a fresh clone (or be one its program creates).
A program this test does not know fails, so that a new kind of command gets a check before it gets a doc
(in the docs other work is writing now, PENDING_DOCS, such a program and placeholder paths are let through:
only the commands of programs this test knows are checked there; drop the leniency once they have landed).
`python` blocks are compiled, and run when they need neither the engine nor a server (the codec and
validator quick starts). A `--flag` named in the prose's inline code must be one some parser here defines.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Docs other work is writing now: a link to one is fine before it exists.
PENDING_DOCS = {"structured-output-soundness.md", "gguf-models.md"}
INPUT_DIRS = ("docs/", "scripts/", "bench/", "tests/", "golden/", "schemas/", "recipe/", "engine/", "server/", "codecs/")
OUTPUT_FLAGS = {"-o", "--output", "--out", "--json", "--report", "--junit", "--html", "--corpus"}
# (program, flag) whose output folder the program creates itself
CREATES_FOLDER = {("bench/soak.py", "--out"), ("scripts/train_draft_head.py", "--out")}
PYTHONS = {"python", "python3", ".venv/bin/python", ".venv/bin/python3"}
RECIPES = {"recipe", ".venv/bin/recipe"}
PYTESTS = {"pytest", ".venv/bin/pytest"}
PIPS = {"pip", ".venv/bin/pip"}
RUN_SUBCOMMANDS = {"encode", "validate", "constrain"}
CHEAP_IMPORTS = ("recipe.codec", "recipe.tokenizer", "recipe.constraints", "recipe.stream", "recipe.detokenizer",
                 "recipe.conversation", "recipe.errors", "json")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    lang: str
    text: str


def blocks(doc: Path) -> list[Block]:
    """Fenced code blocks, dedented by their fence's indentation (a block inside a list item)."""
    out: list[Block] = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m["lang"]:
            indent, start, body = len(m["indent"]), i + 1, []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
                i += 1
            out.append(Block(doc, start, m["lang"], "\n".join(body)))
        i += 1
    return out


def shell_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line offset, argv) of each simple command: continuations joined, comments, env and redirections gone."""
    out: list[tuple[int, list[str]]] = []
    joined, first = "", 0
    for n, line in enumerate(text.splitlines()):
        if not joined:
            first = n
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        joined += line
        lexer = shlex.shlex(joined, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens, joined = list(lexer), ""
        argv: list[str] = []
        for tok in [*tokens, ";"]:
            if tok in {"&&", "||", ";", "|", "&"}:
                while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
                    argv.pop(0)
                if argv:
                    out.append((first, argv))
                argv = []
            elif argv and argv[-1] in {">", ">>", "<", "2>"}:
                argv.pop()  # a redirection and its target
            else:
                argv.append(tok)
    return out


def doc_commands() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for doc in DOCS:
        for block in blocks(doc):
            if block.lang in {"bash", "sh", "shell"}:
                for offset, argv in shell_commands(block.text):
                    found.append((f"{doc.relative_to(ROOT)}:{block.line + offset + 1}", argv))
    return found


# ---- what the programs accept


@cache
def recipe_parser() -> argparse.ArgumentParser:
    from recipe.cli import build_parser

    return build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _literal_strs(node: ast.AST | None) -> list[str] | None:
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


@cache
def script_flags(path: Path) -> dict[str, list[str] | None] | None:
    """Flag → its literal choices (None: any value) of every `add_argument` in a script; None: no argparse."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loop_values: dict[int, tuple[str, list[str]]] = {}
    for node in ast.walk(tree):  # `for flag in ("a", "b"): ap.add_argument(f"--{flag}")`
        values = _literal_strs(node.iter) if isinstance(node, ast.For) else None
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and values is not None:
            for inner in ast.walk(node):
                loop_values[id(inner)] = (node.target.id, values)
    flags: dict[str, list[str] | None] = {}
    seen = False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        seen = True
        names: list[str] = []
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.append(arg.value)
            elif isinstance(arg, ast.JoinedStr) and id(node) in loop_values:
                var, values = loop_values[id(node)]
                template = "".join(p.value if isinstance(p, ast.Constant) else "{}" for p in arg.values)
                if all(isinstance(p, ast.Constant) or (isinstance(p, ast.FormattedValue) and isinstance(
                        p.value, ast.Name) and p.value.id == var) for p in arg.values):
                    names.extend(template.replace("{}", v) for v in values)
        kw = {k.arg: k.value for k in node.keywords}
        choices = _literal_strs(kw.get("choices"))
        boolean_optional = isinstance(kw.get("action"), ast.Attribute) and kw["action"].attr == "BooleanOptionalAction"
        for name in names:
            if name.startswith("-"):
                flags[name] = choices
                if boolean_optional and name.startswith("--"):
                    flags["--no-" + name[2:]] = None
    return flags if seen else None


@cache
def extras() -> frozenset[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return frozenset(project.get("optional-dependencies", {}))


# ---- the checks


def _tracked_folder(folder: Path) -> bool:
    """A folder a fresh clone has: tracked files under it (ignored folders such as artifacts/ are not)."""
    if folder.is_absolute():
        return folder.is_dir() and not folder.is_relative_to(ROOT)
    return folder == Path(".") or any(t.startswith(f"{folder.as_posix()}/") for t in _tracked())


@cache
def _tracked() -> tuple[str, ...]:
    proc = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    return tuple(proc.stdout.splitlines()) if proc.returncode == 0 else ()


def _paths(args: list[str], program: str = "") -> list[str]:
    problems = []
    for i, arg in enumerate(args):
        if i and args[i - 1] in OUTPUT_FLAGS:
            folder = Path(arg).parent
            if (program, args[i - 1]) not in CREATES_FOLDER and _tracked() and not _tracked_folder(folder):
                problems.append(f"{args[i - 1]} {arg}: a fresh clone has no folder {folder}")
            continue
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        path = value.split("::", 1)[0]
        if path.startswith(INPUT_DIRS) and not (ROOT / path).exists():
            problems.append(f"{path} does not exist")
    return problems


def _flags_in(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--") and len(a) > 2]


def check_recipe(args: list[str]) -> list[str]:
    parser = recipe_parser()
    problems = _paths(args)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(args)
    except SystemExit:
        message = err.getvalue().strip().splitlines()[-1:] or ["(no message)"]
        return [*problems, f"`recipe {' '.join(args)}` does not parse: {message[0]}"]
    sub, rest = parser, list(args)
    while rest and (subs := _subparsers(sub)) and rest[0] in subs:
        sub, rest = subs[rest[0]], rest[1:]
    known = set(sub._option_string_actions)
    problems += [f"`recipe` has no flag {f} here (abbreviated or misspelt)" for f in _flags_in(rest) if f not in known]
    return problems


def check_script(script: Path, args: list[str]) -> list[str]:
    if not script.is_file():
        return [f"{script.relative_to(ROOT) if script.is_relative_to(ROOT) else script} does not exist"]
    problems = _paths(args, script.relative_to(ROOT).as_posix() if script.is_relative_to(ROOT) else "")
    flags = script_flags(script)
    if flags is None:
        return problems
    name = script.relative_to(ROOT)
    for i, arg in enumerate(args):
        if not arg.startswith("--") or arg == "--":
            continue
        flag, _, inline = arg.partition("=")
        if flag not in flags:
            problems.append(f"{name} has no flag {flag}")
            continue
        choices = flags[flag]
        value = inline or (args[i + 1] if i + 1 < len(args) else "")
        if choices is not None and value not in choices:
            problems.append(f"{name} {flag} takes one of {choices}, not {value!r}")
    return problems


def check_python(args: list[str]) -> list[str]:
    if args[:2] == ["-m", "pytest"]:
        return _paths(args[2:]) + [f"{p} does not exist" for p in args[2:]
                                  if not p.startswith("-") and not (ROOT / p.split("::")[0]).exists()
                                  and "/" in p]
    if args and args[0] == "-m":
        module = args[1]
        return [] if importlib.util.find_spec(module) is not None else [f"no module {module}"]
    if not args:
        return ["bare python"]
    return check_script(ROOT / args[0], args[1:])


def check_pip(args: list[str]) -> list[str]:
    problems = []
    for arg in args:
        m = re.fullmatch(r"\.?\[([\w,-]+)\]", arg.lstrip("."))
        if arg.startswith(".[") and m:
            problems += [f"pyproject.toml declares no extra {e!r}" for e in m[1].split(",") if e not in extras()]
    for i, arg in enumerate(args):
        if args[i - 1] in {"-c", "-r"} and i and not (ROOT / arg).exists():
            problems.append(f"{arg} does not exist")
    return problems


def check_curl(args: list[str]) -> list[str]:
    for i, arg in enumerate(args):
        if arg in {"-d", "--data"} and i + 1 < len(args):
            try:
                json.loads(args[i + 1])
            except ValueError:
                return [f"curl body is not JSON: {args[i + 1]!r}"]
    return []


def check(argv: list[str], strict: bool = True) -> list[str]:
    """What is wrong with one command; `strict=False` lets placeholders and programs this test does not know pass."""
    program, args = argv[0], argv[1:]
    placeholders = [a for a in argv if "/path/to" in a or re.search(r"<[A-Za-z_ .-]+>", a)]
    if placeholders and strict:  # a command block runs as written; a placeholder belongs in the prose
        return [f"placeholder {p!r} in a command" for p in placeholders]
    if program in RECIPES:
        return check_recipe(args)
    if program in PYTHONS:
        return check_python(args)
    if program in PYTESTS:
        return [f"{p} does not exist" for p in args if "/" in p and not (ROOT / p.split("::")[0]).exists()]
    if program in {"bash", "sh"}:
        if not args or not (ROOT / args[0]).is_file():
            return [f"{args[0] if args else '(nothing)'} does not exist"]
        if args[0] == "scripts/serve.sh":
            return check_recipe(["serve", *args[1:]])
        return _paths(args[1:])
    if program in PIPS:
        return check_pip(args)
    if program == "curl":
        return check_curl(args)
    if program == "cd":
        return [] if (ROOT / args[0]).is_dir() else [f"no folder {args[0]}"]
    if not strict:
        return []
    return [f"no check knows the program {program!r}: add one to tests/test_docs_commands.py"]


COMMANDS = doc_commands()


def test_the_docs_have_commands() -> None:
    assert len(COMMANDS) > 40, COMMANDS
    assert any(argv[:2] == ["bash", "scripts/serve.sh"] for _, argv in COMMANDS)


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_doc_command(where: str, argv: list[str]) -> None:
    problems = check(argv, strict=where.split(":")[0].removeprefix("docs/") not in PENDING_DOCS)
    assert not problems, f"{where}: {shlex.join(argv)}\n  " + "\n  ".join(problems)


RUNNABLE: list[tuple[str, list[str]]] = []
for _where, _argv in COMMANDS:  # each command once, where it first appears
    if _argv[0] in RECIPES and _argv[1:2] and _argv[1] in RUN_SUBCOMMANDS and all(_argv[1:] != a[1:] for _, a in RUNNABLE):
        RUNNABLE.append((_where, _argv))


@pytest.mark.parametrize(("where", "argv"), RUNNABLE, ids=[w for w, _ in RUNNABLE])
def test_cheap_doc_command_runs(where: str, argv: list[str]) -> None:
    """`validate` and `constrain check` exit 1 when an example is invalid, as the docs' examples are."""
    proc = subprocess.run([sys.executable, "-m", "recipe.cli", *argv[1:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode in (0, 1), f"{where}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.strip(), f"{where}: printed nothing"


PYTHON_BLOCKS = [b for doc in DOCS for b in blocks(doc) if b.lang == "python"]


def _cheap(code: str) -> bool:
    modules = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return bool(modules) and all(m.startswith(CHEAP_IMPORTS) for m in modules)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"{b.doc.name}:{b.line}" for b in PYTHON_BLOCKS])
def test_python_block(block: Block) -> None:
    compile(block.text, f"{block.doc.name}:{block.line}", "exec")
    if _cheap(block.text) and block.doc.name not in PENDING_DOCS:
        proc = subprocess.run([sys.executable, "-c", block.text], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"{block.doc.name}:{block.line}\n{proc.stderr[-3000:]}"


def test_the_quick_starts_are_run() -> None:
    readme = [b for b in PYTHON_BLOCKS if b.doc.name == "README.md" and _cheap(b.text)]
    assert {"recipe.codec", "recipe.constraints"} <= {m for b in readme for m in ("recipe.codec", "recipe.constraints")
                                                     if m in b.text}, "the codec and validator quick starts"


# Flags of other programs the docs name: pip, and the Claude Code and Codex CLIs (docs/clients.md).
FOREIGN_FLAGS = {"--no-deps", "--output-format", "--system-prompt", "--tools", "--last"}


def known_flags() -> set[str]:
    """Every flag of the `recipe` commands, of the scripts under bench/, scripts/, golden/ and tests/, and of pytest's
    own options added by the conftests."""
    known: set[str] = set(FOREIGN_FLAGS)

    def walk(parser: argparse.ArgumentParser) -> None:
        known.update(parser._option_string_actions)
        for sub in _subparsers(parser).values():
            walk(sub)

    walk(recipe_parser())
    for folder in ("bench", "scripts", "golden", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if "add_argument" in text:
                known.update(script_flags(path) or {})
            known.update(re.findall(r"addoption\(\s*[\"'](--[\w-]+)", text))
    return known


def test_flags_named_in_prose_exist() -> None:
    known = known_flags()
    missing = []
    for doc in DOCS:
        if doc.name in PENDING_DOCS:
            continue
        prose = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        for span in re.findall(r"`([^`]+)`", prose):  # a span may wrap onto the next line
            missing += [f"{doc.relative_to(ROOT)}: {flag}" for flag in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*[a-z0-9])(?![\w*-])", span)
                        if flag not in known]
    assert not missing, "flags no parser defines:\n  " + "\n  ".join(missing)


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_links_between_docs_resolve() -> None:
    for doc in DOCS:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path = (doc.parent / target).resolve() if target else doc
            assert path.exists() or path.name in PENDING_DOCS, f"{doc.relative_to(ROOT)} links to missing {target}"
            if anchor and path.exists() and path.suffix == ".md":
                assert anchor in _anchors(path), f"{doc.relative_to(ROOT)} links to {target}#{anchor}: no such heading"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    first = next(b for b in blocks(ROOT / "README.md") if b.lang == "bash")
    commands = [argv for _, argv in shell_commands(first.text)]
    assert commands == [["bash", "scripts/serve.sh"], ["bash", "scripts/test.sh"]]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith(("#", "set ", "cd "))]
    assert ci == ["bash scripts/test.sh"]


# ---- the checker itself catches what it is for


@pytest.mark.parametrize("line", [
    ".venv/bin/recipe serve --no-such-flag",
    ".venv/bin/recipe serve --kv-host 1",                      # an abbreviation argparse would accept
    ".venv/bin/recipe conformance --url http://127.0.0.1:8000",
    ".venv/bin/recipe serve --decode-backend turbo",            # not one of its choices
    ".venv/bin/python bench/codec.py --bodies 80 --nope",
    ".venv/bin/python bench/codec.py --clock cpu",
    ".venv/bin/python bench/server.py --weight-formats q4_1",   # the looped flags are read too
    ".venv/bin/python bench/no_such_bench.py",
    "bash scripts/serve.sh --prot 8001",
    ".venv/bin/recipe validate --schema docs/examples/missing.json",
    ".venv/bin/recipe conformance --base-url http://127.0.0.1:8000 --html artifacts/report.html",  # not in a clone
    "make everything",
    ".venv/bin/recipe serve --model /path/to/deepseek-v4",
])
def test_the_checker_refuses(line: str) -> None:
    [(_, argv)] = shell_commands(line)
    assert check(argv), line


def test_the_checker_accepts() -> None:
    for line in [".venv/bin/python bench/server.py --weight-format q4_1 --decode-backend fused",
                 ".venv/bin/recipe serve --no-huge-pages --port 8001",
                 "RAYON_NUM_THREADS=1 .venv/bin/python bench/encode_long.py --sizes 10000  # a comment"]:
        [(_, argv)] = shell_commands(line)
        assert not check(argv), (line, check(argv))
