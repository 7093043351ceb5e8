"""Training hyper-parameters (torch-free, so the command line can show the defaults)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TrainSettings"]


@dataclass(frozen=True, slots=True)
class TrainSettings:
    """Hyper-parameters; the defaults are the committed model's run (see models/camera_detector/TRAINING.md)."""

    seed: int = 0
    epochs: int = 12
    batch_size: int = 16
    lr: float = 3e-3
    weight_decay: float = 1e-4
    #: torch intra-op threads. One is faster than two on a shared 2-core machine (no spinning barriers),
    #: and the batch-making thread gets the other core.
    threads: int = 1
    #: Stop after the first epoch that ends past this many seconds of training (``None``: never).
    time_budget_s: float | None = None
