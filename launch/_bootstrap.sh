#!/usr/bin/env bash
# Shared set-up for launch/demo.sh and launch/test.sh: idempotently brings a fresh machine to a working
# .venv at the repo root. Sourced, not executed. Re-running is cheap: a stamp of pyproject.toml skips pip
# when nothing changed.
#
# `source _bootstrap.sh --kernels-later` sets up the venv only; the caller then runs `_need_kernels` itself
# (launch/test.sh does, beside the static checks: both are single-threaded and take ~30-45 s on a fresh clone).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"

_log() { printf '[setup] %s\n' "$*" >&2; }

_need_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        _log "creating $VENV"
        "$PY" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade pip
    fi
    local stamp="$VENV/.perception-installed"
    local want
    want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$VENV/bin/python" -c "import perception" 2>/dev/null; then
        _log "installing the project and its dependencies into .venv (first run takes a minute)"
        local log="$VENV/pip-install.log"
        if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -e "$ROOT[dev,ros]" >"$log" 2>&1; then
            tail -n 40 "$log" >&2
            _log "pip install failed; full log: $log"
            return 1
        fi
        echo "$want" > "$stamp"
    fi
}

_need_kernels() {
    # Fusion's compiled loops (numba) are cached on disk; compile them here, once per change of their
    # sources, rather than inside the first replay or test that builds a Fuser. numba invalidates a
    # cached kernel only when its own file changes, not the constants it reads from perception.types:
    # on any change, the cache is cleared and rebuilt.
    local stamp="$VENV/.perception-kernels"
    local want
    want="$(cat "$ROOT"/perception/fusion/_kernels.py "$ROOT"/perception/fusion/_track_kernels.py \
        "$ROOT"/perception/types.py | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        _log "compiling the fusion kernels (once after an install or a change to them; ~45 s on 2 cores)"
        rm -f "$ROOT"/perception/fusion/__pycache__/_kernels.*.nb[ic] "$ROOT"/perception/fusion/__pycache__/_track_kernels.*.nb[ic]
        "$VENV/bin/python" -c "from perception.fusion import warm_up; warm_up()"
        echo "$want" > "$stamp"
    fi
}

_need_venv
if [ "${1:-}" != "--kernels-later" ]; then
    _need_kernels
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
