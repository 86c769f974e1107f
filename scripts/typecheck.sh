#!/usr/bin/env bash
# ruff over the tree, then mypy over an installed copy of the package: the folder → import map
# (recipe.codecs ← codecs/, recipe.engine ← engine/, ...) only exists once installed, so mypy checks the
# wheel's layout, where every cross-folder import resolves.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/pip install -q --no-deps --no-build-isolation --target "$tmp" . >/dev/null
cp pyproject.toml "$tmp/"
(cd "$tmp" && "$OLDPWD/.venv/bin/mypy" --config-file pyproject.toml recipe)
