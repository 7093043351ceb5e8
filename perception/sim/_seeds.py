"""Seeds kept for evaluation: the camera model's training refuses them, ``perception model-quality`` scores on them.

A drive is a pure function of its seed, so a model can only be scored fairly on drives generated from seeds
its training never saw.
"""

from __future__ import annotations

__all__ = ["EVAL_SEED", "FIRST_TRAINING_SEED", "is_evaluation_seed"]

#: The evaluation drive of ``perception model-quality`` (urban).
EVAL_SEED = 1234
#: Every seed below this one is kept for evaluation too.
FIRST_TRAINING_SEED = 100


def is_evaluation_seed(seed: int) -> bool:
    """Whether ``seed`` is kept for evaluation (never trained on)."""
    return seed < FIRST_TRAINING_SEED or seed == EVAL_SEED
