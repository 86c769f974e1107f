#!/usr/bin/env bash
# Set everything up, then run the main job: `recipe serve` on the embedded demo model (SmolLM2-135M-Instruct).
set -euo pipefail
cd "$(dirname "$0")/.."
RECIPE_SKIP_BROWSER=1 bash scripts/setup.sh
exec .venv/bin/recipe serve "$@"
