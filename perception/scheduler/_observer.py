"""What a run's observer sees: the one hook through which a recorder learns the runtime's decisions.

An observer is given, in this order: the fusion stage to wrap (:meth:`RunObserver.fusion`: the wrapper sees
every frame fusion consumes, in the order fusion consumes them, with the results it fuses, raw model outputs
included), the session once the runtime is up (:meth:`RunObserver.begin`: a run that never started leaves
what the observer would replace, an earlier recording, as it was), then every sample of the sensors the run
uses (those enabled; a replay's trigger too) and every ego pose as it is received (:meth:`RunObserver.sample`,
:meth:`RunObserver.ego`, from any thread),
and every frame's result as it is delivered (:meth:`RunObserver.result`: dropped and shed frames too).
Entry points that take one (``LiveRuntime(observer=)``, ``replay_drive(observer=)``) call nothing
else; none of the calls may raise into them (an observer counts its own failures; ``LiveRuntime`` counts
what one raises anyway, in ``status()["failed"]["observer"]``, and goes on).
"""

from __future__ import annotations

from typing import Protocol

from perception.scheduler._session import FusionStage, Session
from perception.types import EgoPose, FrameResult, Sample

__all__ = ["RunObserver"]


class RunObserver(Protocol):
    """Receives a run's inputs and decisions (see the module docs); ``perception.record`` records them."""

    def begin(self, session: Session) -> None:
        """The session the run resolved (rig, metadata, whether fusion reads the source's ego poses)."""

    def fusion(self, stage: FusionStage | None) -> FusionStage | None:
        """The fusion stage the runtime is to use in place of ``stage`` (a wrapper of it)."""

    def sample(self, sample: Sample, arrival_ns: int) -> None:
        """A sample as received, with its arrival on the host's monotonic clock (any thread)."""

    def ego(self, pose: EgoPose, arrival_ns: int) -> None:
        """An ego pose as received (any thread)."""

    def result(self, result: FrameResult) -> None:
        """A frame's result as it is delivered (every frame, dropped ones included)."""
