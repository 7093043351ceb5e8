"""A vehicle's run, recorded and reproduced exactly (``perception live/replay --record``, ``replay --as-recorded``).

:class:`RunRecorder` is a :class:`perception.scheduler.RunObserver`: given to ``LiveRuntime(observer=)``
or ``replay_drive(observer=)`` it writes one MCAP (a drive: the samples as received, with their arrival
times; plus, per frame, the runtime's decisions, the raw model outputs fusion consumed, the fused output
and the tracker state, from which a reader derives each frame's digests), bounded by
:class:`RecordOptions` (rotated segments).
:func:`replay_as_recorded` re-fuses it under the recorded decisions (or reruns today's models on the
recorded samples) and names the first frame that differs, and why (:class:`Divergence`).
"""

from __future__ import annotations

from perception.record._digest import RESOLUTION
from perception.record._format import segments
from perception.record._recorder import RecordOptions, RunRecorder
from perception.record._replay import AsRecordedOutcome, Divergence, replay_as_recorded, source_poses

__all__ = [
    "RESOLUTION",
    "AsRecordedOutcome",
    "Divergence",
    "RecordOptions",
    "RunRecorder",
    "replay_as_recorded",
    "segments",
    "source_poses",
]
