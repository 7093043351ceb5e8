#!/usr/bin/env bash
# Installs everything that is missing, then runs the whole test suite (lint, types, tests).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_bootstrap.sh" --kernels-later

echo "== ruff (set-up took ${SECONDS} s)"
ruff check perception tests bench models
# mypy and the fusion kernels' first compilation (numba) are each single-threaded: run them side by side.
MYPY_LOG="$(mktemp)"
trap 'rm -f "$MYPY_LOG"' EXIT
mypy >"$MYPY_LOG" 2>&1 &
MYPY_PID=$!
_need_kernels
echo "== mypy (with the kernels: ${SECONDS} s so far)"
MYPY_RC=0
wait "$MYPY_PID" || MYPY_RC=$?
cat "$MYPY_LOG"
if [ "$MYPY_RC" -ne 0 ]; then
    exit "$MYPY_RC"
fi
echo "== pytest (${SECONDS} s so far)"
# The suite starts hundreds of Python processes (the CLI, Ray workers, Triton's python stubs) that import
# this package: compile it once, so that each reads bytecode even where PYTHONDONTWRITEBYTECODE is set.
python -m compileall -q -j 0 perception >/dev/null
# -p no:cacheprovider keeps a read-only clone clean; exit 5 (no tests collected) is a failure here.
# --durations=15: the 15 slowest tests, so that what the suite costs stays visible.
python -m pytest -p no:cacheprovider --durations=15 "$@"
