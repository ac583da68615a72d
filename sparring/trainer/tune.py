"""`tune()`: the AgentScope-shaped entry point, one call from workflow to trained adapter.

It takes the reference tuner's arguments (workflow_func, judge_func,
train_dataset, eval_dataset, model, auxiliary_models, algorithm) plus
sparring's `models` (several trainable models at once), `run_dir`, `logging`, `league`, `validation`,
`resume`, `overwrite` and `step_hooks`, builds the same `TuneConfig` that `sparring train config.yaml`
reads, and runs the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from .config import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig
from .job import Job
from .league_config import LeagueConfig
from .loop import RunResult
from .run_config import CheckpointsConfig, EvaluationConfig, RunnerConfig
from .step_hooks import StepHook
from .validation_config import ValidationConfig
from .warm_start_config import WarmStartConfig


def tune(
    workflow_func: Callable | type | None = None,
    judge_func: Callable | None = None,
    train_dataset: DatasetConfig | list[dict] | str | None = None,
    model: TunerModelConfig | None = None,
    auxiliary_models: dict[str, TunerModelConfig] | None = None,
    algorithm: AlgorithmConfig | None = None,
    eval_dataset: DatasetConfig | list[dict] | str | None = None,
    *,
    models: dict[str, TunerModelConfig] | None = None,
    run_dir: str | Path | None = None,
    logging: LoggingConfig | None = None,
    league: LeagueConfig | None = None,
    validation: ValidationConfig | None = None,
    warm_start: WarmStartConfig | None = None,
    runner: RunnerConfig | None = None,
    evaluation: EvaluationConfig | None = None,
    checkpoints: CheckpointsConfig | None = None,
    resume: str | Path | None = None,
    overwrite: bool = False,
    step_hooks: Sequence[StepHook] = (),
) -> RunResult:
    """Train the agents of `workflow_func` (a function- or class-style workflow); returns the run's result.

    `resume` continues the run in that folder; `overwrite` replaces a run already in `run_dir` (refused without either);
    `step_hooks` run before every step's rollout and after its update (`StepHook`).
    """
    job = Job(
        model=model or TunerModelConfig(),
        models=models,
        auxiliary_models=auxiliary_models or {},
        algorithm=algorithm or AlgorithmConfig(),
        run_dir=str(run_dir) if run_dir is not None else None,
        logging=logging or LoggingConfig(),
        league=league,
        validation=validation,
        warm_start=warm_start,
        runner=runner,
        evaluation=evaluation,
        checkpoints=checkpoints,
    )
    job.set_workflow(workflow_func, judge=judge_func).set_data(train=train_dataset, eval=eval_dataset)
    return job.tune(resume=resume, overwrite=overwrite, hooks=step_hooks)
