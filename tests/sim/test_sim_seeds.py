"""Seeds kept for evaluation: one rule, shared by the camera model's training and ``perception model-quality``."""

from __future__ import annotations

import pytest

from perception.camera_training._sources import RESERVED_SEEDS, TRAIN_SEEDS, check_training_seeds
from perception.cli._model_quality import RESERVED_SEEDS_NOTE
from perception.sim import EVAL_SEED, FIRST_TRAINING_SEED, is_evaluation_seed


def test_evaluation_seeds_are_never_trained_on() -> None:
    assert is_evaluation_seed(0) and is_evaluation_seed(FIRST_TRAINING_SEED - 1) and is_evaluation_seed(EVAL_SEED)
    assert not is_evaluation_seed(FIRST_TRAINING_SEED) and not is_evaluation_seed(EVAL_SEED + 1)
    assert not any(is_evaluation_seed(s) for s in TRAIN_SEEDS)
    assert EVAL_SEED in RESERVED_SEEDS and FIRST_TRAINING_SEED not in RESERVED_SEEDS[0]
    check_training_seeds(TRAIN_SEEDS)
    for seed in (7, EVAL_SEED):
        with pytest.raises(ValueError, match="reserved for evaluation"):
            check_training_seeds([FIRST_TRAINING_SEED, seed])
    assert str(EVAL_SEED) in RESERVED_SEEDS_NOTE and str(FIRST_TRAINING_SEED) in RESERVED_SEEDS_NOTE
