"""The adapter a run keeps as `best`: its weights that played the validation tasks best.

`BestAdapter` plays the validation tasks (`validation_config.py`) with the
live weights whenever a validation is due, logs the column under
`validation/` (its prefill counts too, kept out of the step's own), and when
the chosen metric beats every earlier validation saves the weights as the
sampler weights `best` of every trainable model. `validation.json` in the run
folder holds every validation and the one chosen; a resumed run reads it
back, so it neither repeats a validation nor forgets the best. Every
validation samples from `algorithm.seed` as `sparring eval` does, so
`sparring eval --adapter .../best` on the validation tasks plays the games
the choice was made on, and two candidates meet the same games.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..integrations import TunerHandle
from ..logging import MetricsLogger, TrainingProgress
from .evaluation import evaluate_policy
from .prefill_meter import PrefillMeter
from .resolve import ResolvedRun
from .schema import ConfigError
from .validation_config import ValidationConfig

VALIDATION_FILE = "validation.json"
BEST = "best"
"""The sampler weights' name of the chosen adapter (`checkpoints/<model>/sampler_weights/best`)."""


@dataclass
class Validation:
    """One validation: the chosen metric of the weights after `steps` steps, with its 95 % interval."""

    steps: int
    """Optimizer steps the weights had taken."""
    mean: float
    """The metric's mean over the validation tasks: what the choice compares."""
    low: float
    """Lower end of its 95 % interval, so a reader sees how far apart two candidates really are."""
    high: float
    """Upper end of its 95 % interval."""


@dataclass
class BestAdapter:
    """A run's validations so far and the adapter they chose."""

    run: ResolvedRun
    """The run: its `validation:` section and tasks, workflow, judge, settings and models."""
    run_dir: Path
    """Where `validation.json` is kept."""
    meter: PrefillMeter
    """The run's prefill counts: a validation's own are logged with it, not with the step around it."""
    logger: MetricsLogger
    """Where each validation's metrics go."""
    progress: TrainingProgress
    """The console bar of each validation."""
    validations: list[Validation] = field(default_factory=list)
    """Every validation of the run, resumed ones included, in step order."""
    paths: dict[str, str] = field(default_factory=dict)
    """Model key -> path of its `best` sampler weights."""

    @classmethod
    def open(
        cls, run: ResolvedRun, run_dir: Path, meter: PrefillMeter, logger: MetricsLogger, progress: TrainingProgress
    ) -> BestAdapter | None:
        """The run's choice, with what an earlier process of it recorded; None when the config has no `validation:`."""
        if run.config.validation is None:
            return None
        found = cls(run, run_dir, meter, logger, progress)
        if (run_dir / VALIDATION_FILE).exists():
            saved = json.loads((run_dir / VALIDATION_FILE).read_text(encoding="utf-8"))
            found.validations = [Validation(**entry) for entry in saved["validations"]]
            found.paths = saved["paths"]
        return found

    @property
    def config(self) -> ValidationConfig:
        """The `validation:` section (present: `open` makes no BestAdapter without one)."""
        assert self.run.config.validation is not None
        return self.run.config.validation

    @property
    def chosen(self) -> Validation | None:
        """The best validation so far (the earliest of equals), whose weights are the sampler weights `best`."""
        sign = 1 if self.config.mode == "max" else -1
        return max(self.validations, key=lambda validation: sign * validation.mean, default=None)

    def due(self, steps: int, total_steps: int) -> bool:
        """Whether the weights after `steps` steps are a candidate not validated yet."""
        return self.config.due(steps, total_steps) and all(earlier.steps != steps for earlier in self.validations)

    async def validate(self, steps: int, make_tuner: Callable[[], TunerHandle]) -> None:
        """Play the validation tasks with `make_tuner`'s weights (those after `steps` steps); keep them as `best` when
        they beat every earlier candidate."""
        run, metric = self.run, self.config.metric
        seed = run.config.algorithm.seed
        run.models.reseed(seed, 0)
        validation = evaluate_policy(
            run.episode_fn,
            run.validation_tasks,
            make_tuner,
            run.settings,
            run.judge,
            f"validation {steps}",
            "model",
            steps,
            seed,
            self.progress,
        )
        column, prefill = await self.meter.apart(validation)
        self.logger.log(steps, {**column.flat("validation/"), **prefill.metrics("validation/engine/")})
        if metric not in column.estimates:
            raise ConfigError(
                f"validation.metric: {metric!r} is not a metric of the validation games; they have "
                f"{sorted(column.estimates)}"
            )
        found = column.estimates[metric]
        self.validations.append(Validation(steps, found.mean, found.low, found.high))
        if self.chosen is self.validations[-1]:
            self.paths = run.models.save_for_sampler(BEST)
        self._write()

    def _write(self) -> None:
        chosen = self.chosen
        record = {
            "metric": self.config.metric,
            "mode": self.config.mode,
            "chosen": asdict(chosen) if chosen else None,
            "paths": self.paths,
            "validations": [asdict(validation) for validation in self.validations],
        }
        path = self.run_dir / VALIDATION_FILE
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        temporary.replace(path)
