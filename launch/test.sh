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
PYTEST=(python -m pytest -p no:cacheprovider --durations=15)
if [ "$#" -gt 0 ]; then
    "${PYTEST[@]}" "$@"
    exit 0
fi
# The whole suite, in two pytest processes side by side: most of its time is spent waiting (on servers
# starting and stopping, sleeper models, Ray, processes signalled), at about one core of two. One runs the
# tests about processes -- tests/fleet (Ray clusters), tests/server and tests/reliability (servers
# started, killed, faulted) -- and tests/record, the other the rest: about equal halves (measured with
# --junitxml: without tests/record the side's tests took 1012 s and the rest's 1586 s, the demo not counted,
# on a loaded host). Each test's check of what was left behind counts only its own processes and /dev/shm
# regions.
# The first runs in a session of its own, so that a Ctrl-C reaches it once, from here, however this
# script ends: it then stops its clusters and servers as pytest does (a background job ignores SIGINT).
SIDE=(tests/fleet tests/server tests/reliability tests/record)
SIDE_LOG="$(mktemp)"
_stop_side() {
    if [ -n "${SIDE_PID:-}" ]; then
        kill -INT "$SIDE_PID" 2>/dev/null || true
        wait "$SIDE_PID" || true
    fi
    rm -f "$MYPY_LOG" "$SIDE_LOG"
}
trap _stop_side EXIT
(trap - INT && exec setsid "${PYTEST[@]}" "${SIDE[@]}") >"$SIDE_LOG" 2>&1 &
SIDE_PID=$!
# A Ctrl-C reaches the rest's pytest, which may not stop at once: a test can be running a command whose
# own SIGINT handler takes it. This script remembers it, and stops the other (the trap) once the rest ends.
INTERRUPTED=
trap 'INTERRUPTED=1' INT
REST_RC=0
"${PYTEST[@]}" "${SIDE[@]/#/--ignore=}" || REST_RC=$?
if [ -n "$INTERRUPTED" ] || [ "$REST_RC" -eq 2 ]; then  # 2: pytest's "interrupted"
    exit 130
fi
SIDE_RC=0
wait "$SIDE_PID" || SIDE_RC=$?
SIDE_PID=
echo "== pytest ${SIDE[*]} (beside the rest; its own output)"
cat "$SIDE_LOG"
echo "== pytest done (${SECONDS} s in all): the rest exited ${REST_RC}, ${SIDE[*]} ${SIDE_RC}"
if [ "$REST_RC" -ne 0 ]; then
    exit "$REST_RC"
fi
exit "$SIDE_RC"
