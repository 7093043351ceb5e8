"""A replay's report.json says what its stream counted of the records' consumer: the frames whose intake waited
for it far behind (``admission.intake_held``) and the records it did not take (``admission.undelivered``)."""

from __future__ import annotations

import anyio
import pytest
from fake_answers import EmptyAnswers
from held_stream import consumer_behind, held_stream_config

from perception.metrics import RunCounters, RunReport
from perception.metrics._run_report import LatencySummary
from perception.replay._session import _admission_section
from perception.scheduler import Runtime

pytestmark = pytest.mark.anyio


async def test_report_json_counts_the_stream_s_held_intake_and_undelivered_records() -> None:
    # Runtime.intake_held and Runtime.undelivered were logged (a warning each) and reached no report.
    with anyio.fail_after(20):  # watchdog
        async with Runtime(held_stream_config(), client=EmptyAnswers(), check_models=False, fusion=None) as rt:
            await consumer_behind(rt)
    assert rt.intake_held == 1 and rt.undelivered > 0
    section = _admission_section(rt)
    assert section is not None and section["mode"] == "fixed"  # the admission's own entries, as before
    assert (section["intake_held"], section["undelivered"]) == (rt.intake_held, rt.undelivered), section
    written = RunReport(RunCounters(), LatencySummary(), admission=section).to_json()
    admission = RunReport.from_json(written).admission
    assert admission is not None and admission["undelivered"] == rt.undelivered, admission
