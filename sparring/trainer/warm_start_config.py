"""The `warm_start:` section of a job: supervised steps on worked examples before the first RL step.

What it does is `warm_start.py`; this file is only what the YAML says.
"""

from __future__ import annotations

from pydantic import Field

from .config_limits import MAX_BATCH_SIZE, MAX_LEARNING_RATE, MAX_STEPS
from .dataset_config import DatasetConfig
from .schema import ConfigRecord


class WarmStartConfig(ConfigRecord):
    """Cross-entropy on the replies of chat examples, `steps` optimizer steps, before the run's first RL step."""

    dataset: DatasetConfig
    """The examples, one per row: `messages` (a chat) ending in the assistant reply to learn, and an optional
    `weight` (default 1) that scales its tokens' loss (e.g. 1/k for each of k equally right replies)."""
    steps: int = Field(ge=1, le=MAX_STEPS)
    """Optimizer steps, each on the next `batch_size` examples, as training steps draw tasks (`TaskStream`): the
    dataset's order, reshuffled every pass from `dataset.seed` + the pass when `dataset.shuffle`; a pass's last batch
    may be smaller."""
    batch_size: int = Field(default=16, ge=1, le=MAX_BATCH_SIZE)
    """Examples per step."""
    learning_rate: float = Field(default=1e-3, gt=0.0, le=MAX_LEARNING_RATE)
    """Adam's step size for these steps (Tinker's Adam defaults otherwise, no gradient clipping); RL then starts a
    fresh optimizer at `algorithm`'s settings."""
    model: str | None = None
    """The trainable model it teaches; None: the only one (required when several train)."""

    def model_key(self, trainable: list[str]) -> str:
        """The trainable model it teaches, among `trainable`."""
        if self.model is not None:
            if self.model not in trainable:
                raise ValueError(
                    f"warm_start.model: no trainable model {self.model!r}; trainable models are {sorted(trainable)}"
                )
            return self.model
        if len(trainable) > 1:
            raise ValueError(f"warm_start.model: several models train ({sorted(trainable)}); name the one it teaches")
        return trainable[0]
