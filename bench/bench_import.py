"""Import cost: what ``import perception``, ``perception.scheduler`` and ``perception.live`` take in a
fresh interpreter, and whether they load numba or scipy (they must not: fusion is imported when first
needed, e.g. by a sweep window or the fusion stage). ``import perception.fusion`` is measured beside
them for scale.

Each import runs ``--repeats`` times in a fresh ``python -X importtime`` process; the JSON keeps the
median wall time, the cumulative import time Python reports for the module, and the heavy modules
loaded. Usage: ``.venv/bin/python bench/bench_import.py [--repeats 5]`` -> ``bench/results/import.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perception.benchmark import environment

RESULTS = Path(__file__).resolve().parent / "results" / "import.json"
MODULES = ("perception", "perception.scheduler", "perception.live", "perception.fusion")
HEAVY = ("numba", "scipy")


def _one(module: str) -> tuple[float, float, list[str]]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    cumulative_us = 0
    for line in out.stderr.splitlines():  # "import time: self [us] | cumulative | imported package"
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module:
            cumulative_us = int(parts[1])
    return wall, cumulative_us / 1e3, json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows: dict[str, Any] = {}
    for module in MODULES:
        runs = [_one(module) for _ in range(args.repeats)]
        rows[module] = {
            "wall_ms_median": round(statistics.median(r[0] for r in runs) * 1e3, 1),
            "import_ms_median": round(statistics.median(r[1] for r in runs), 1),
            "heavy_modules": runs[-1][2],
        }
        print(f"{module:24s} {rows[module]}")
    light = [m for m in MODULES if m != "perception.fusion"]
    result = {
        "environment": environment(),
        "repeats": args.repeats,
        "modules": rows,
        "no_numba_or_scipy": all(not rows[m]["heavy_modules"] for m in light),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0 if result["no_numba_or_scipy"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
