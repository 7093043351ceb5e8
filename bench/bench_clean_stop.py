"""Clean stops: replay the bundled drive N times in a row and count what a stop leaves behind.

Each run is ``perception replay DRIVE --rate max --out TMP`` in a subprocess (its own embedded Triton).
Counted per run, and written to ``bench/results/clean_stop.json``:

* warnings about the server's stop in the run's output (``tritonserver pid N stopped with ...``,
  ``ignored SIGTERM``, ``stubs ... still alive``) and the exit code of ``perception replay``;
* processes left behind by that run: a ``tritonserver`` or ``triton_python_backend_stub`` whose
  arguments carry the run's shared-memory prefix ``perception_<replay pid>_`` (other servers on a
  shared machine are not counted);
* ``/dev/shm`` entries left behind: ``perception_<replay pid>_*`` and any new
  ``triton_python_backend_shm_region_*`` (Triton's default prefix, which this package never uses).

Usage: ``.venv/bin/python bench/bench_clean_stop.py [--runs 20] [--drive replay_data/urban_seed7_10s.mcap]``
Exit status 1 when any run left a warning, a process or a region behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perception.server import iter_processes

log = logging.getLogger("bench_clean_stop")

REPO = Path(__file__).resolve().parents[1]
SHM = Path("/dev/shm")
DEFAULT_PREFIX = "triton_python_backend_shm_region_"
#: ``perception`` (the console script) run by this interpreter, from this checkout.
_CLI = "import sys; from perception.cli import main; sys.exit(main())"
_STOP_WARNING = re.compile(r"tritonserver pid \d+ (stopped with|ignored SIGTERM)|python backend stubs .* still alive")


def _leftover_processes(prefix: str) -> list[str]:
    """``pid: argv[0]`` of live tritonserver/stub processes whose arguments carry ``prefix``."""
    found = []
    for p in iter_processes(argv=True):
        if not p.alive or not p.argv or not p.argv[0]:
            continue
        name = os.path.basename(p.argv[0])
        if name in ("tritonserver", "triton_python_backend_stub") and any(prefix in a for a in p.argv):
            found.append(f"{p.pid}: {name}")
    return found


def _shm(prefix: str) -> set[str]:
    try:
        return {p.name for p in SHM.iterdir() if p.name.startswith(prefix)}
    except OSError:
        return set()


def _one(drive: Path, out: Path, timeout_s: float) -> dict[str, Any]:
    default_before = _shm(DEFAULT_PREFIX)
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLI, "replay", str(drive), "--rate", "max", "--out", str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        output += f"\n<killed after {timeout_s:g} s>"
    prefix = f"perception_{proc.pid}_"
    warnings = [line for line in output.splitlines() if _STOP_WARNING.search(line)]
    return {
        "exit_code": proc.returncode,
        "wall_s": round(time.monotonic() - started, 1),
        "stop_warnings": warnings,
        "leftover_processes": _leftover_processes(prefix),
        "leftover_shm": sorted(_shm(prefix) | (_shm(DEFAULT_PREFIX) - default_before)),
        "summary": next((line for line in output.splitlines() if line.startswith("frames ")), None),
        **({"output_tail": output.splitlines()[-15:]} if proc.returncode != 0 else {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--drive", type=Path, default=REPO / "replay_data" / "urban_seed7_10s.mcap")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per run")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "clean_stop.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    runs = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_clean_stop_") as tmp:
        for i in range(args.runs):
            run = _one(args.drive, Path(tmp) / f"run{i}", args.timeout_s)
            runs.append(run)
            log.info(
                "run %2d: exit %s, %d stop warning(s), %d process(es) and %d shm entr(ies) left, %.0f s",
                i + 1,
                run["exit_code"],
                len(run["stop_warnings"]),
                len(run["leftover_processes"]),
                len(run["leftover_shm"]),
                run["wall_s"],
            )
    totals = {
        "runs": len(runs),
        "runs_with_stop_warning": sum(1 for r in runs if r["stop_warnings"]),
        "runs_failed": sum(1 for r in runs if r["exit_code"] != 0),
        "leftover_processes": sum(len(r["leftover_processes"]) for r in runs),
        "leftover_shm": sum(len(r["leftover_shm"]) for r in runs),
    }
    clean = not any(totals[k] for k in ("runs_with_stop_warning", "runs_failed", "leftover_processes", "leftover_shm"))
    report = {
        "benchmark": "clean stops: perception replay --rate max of one drive, N runs in a row",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        },
        "drive": str(args.drive.relative_to(REPO) if args.drive.is_relative_to(REPO) else args.drive),
        "totals": totals,
        "clean": clean,
        "runs": runs,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    log.info("wrote %s: %s", args.output, json.dumps(totals))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
