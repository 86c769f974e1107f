#!/usr/bin/env bash
# Set everything up, then run the default test suite (the `slow` suites run from bench/ or with -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -m "not slow" -n 2 "$@"
