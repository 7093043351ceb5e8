"""Per-model circuit breaker, so a dead or hanging model stops costing a full wait on every frame.

closed --(failure_threshold consecutive failures)--> open --(reset_after)--> half-open
half-open lets exactly one probe through: success closes the circuit, failure re-opens it.
Time is passed in (monotonic ns) so the breaker is deterministic and testable.
"""

from __future__ import annotations

import enum
import logging

from perception.config import CircuitConfig

__all__ = ["CircuitBreaker", "CircuitState"]

log = logging.getLogger(__name__)


class CircuitState(str, enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(self, model: str, config: CircuitConfig) -> None:
        self.model = model
        self._threshold = config.failure_threshold
        self._reset_ns = config.reset_after_ns
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._opened_at = 0
        self._probe_out = False
        self.opened_count = 0

    @property
    def state(self) -> CircuitState:
        return self._state

    def allow(self, now_ns: int) -> bool:
        """May a request go out now? (Reserves the half-open probe when it says yes.)"""
        if self._state is CircuitState.CLOSED:
            return True
        if self._state is CircuitState.OPEN and now_ns - self._opened_at >= self._reset_ns:
            self._state = CircuitState.HALF_OPEN
            self._probe_out = False
        if self._state is CircuitState.HALF_OPEN and not self._probe_out:
            self._probe_out = True
            return True
        return False

    def record_success(self) -> None:
        if self._state is not CircuitState.CLOSED:
            log.info("model %s: circuit closed", self.model)
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._probe_out = False

    def record_failure(self, now_ns: int) -> None:
        self._failures += 1
        if self._state is CircuitState.HALF_OPEN or (
            self._state is CircuitState.CLOSED and self._failures >= self._threshold
        ):
            if self._state is CircuitState.CLOSED:
                self.opened_count += 1
                log.warning("model %s: circuit opened after %d consecutive failures", self.model, self._failures)
            self._state = CircuitState.OPEN
            self._opened_at = now_ns
            self._probe_out = False

    def release_probe(self) -> None:
        """A reserved half-open probe was not sent after all (e.g. the frame was dropped)."""
        self._probe_out = False
