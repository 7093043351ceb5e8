"""Fleet replay on Ray: many drives, many Triton servers, one report and one verdict."""

from __future__ import annotations

from perception.fleet._baseline import BaselineComparison, Tolerances, compare_runs
from perception.fleet._driver import FleetOptions, FleetOutcome, run_fleet
from perception.fleet._plan import FleetDrive, find_drives
from perception.fleet._report import FLEET_JSON, FLEET_MD
from perception.fleet._summary import DriveSummary
from perception.fleet._worker import WorkerSettings

__all__ = [
    "FLEET_JSON",
    "FLEET_MD",
    "BaselineComparison",
    "DriveSummary",
    "FleetDrive",
    "FleetOptions",
    "FleetOutcome",
    "Tolerances",
    "WorkerSettings",
    "compare_runs",
    "find_drives",
    "run_fleet",
]
