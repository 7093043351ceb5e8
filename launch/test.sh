#!/usr/bin/env bash
# Installs everything that is missing, then runs the whole test suite (lint, types, tests).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_bootstrap.sh"

echo "== ruff"
ruff check perception tests bench models
echo "== mypy"
mypy
echo "== pytest"
# -p no:cacheprovider keeps a read-only clone clean; exit 5 (no tests collected) is a failure here.
# --durations=15: the 15 slowest tests, so that what the suite costs stays visible.
python -m pytest -p no:cacheprovider --durations=15 "$@"
