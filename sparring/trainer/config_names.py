"""The names in a config that only what they name can check: run when the run is built, never when a config is read.

A `TuneConfig` validates its structure on construction (types, bounds, the parts agreeing) and imports nothing to
do it. What a name means is checked here, by `check_names`, which `resolve_run` calls first, before any data or
model loads: each model's torch device; `algorithm.algorithm_type` and `algorithm.loss_fn` against their registries
(`ADVANTAGE_ESTIMATORS`, `engine.losses.LOSSES`), one given as an import path ('package.module:function') imported,
its signature checked and registered under that path, so the rest of the run looks it up like a built-in name;
the `loss_fn_config` keys (and an entropy target's coefficient) against that loss; the baselines', the league's
scripted opponents' and the step hooks' import paths. Every problem is one line that starts with the field's dotted
path; several found at once share the line (`ConfigError`, as a config's own validation raises it).
"""

from __future__ import annotations

from collections.abc import Callable

from .config import TuneConfig
from .imports import import_object, import_policy, is_import_path
from .schema import ConfigError
from .step_hooks import import_step_hook


def check_names(config: TuneConfig) -> None:
    """Check (and register) every name `config` gives that needs an import to check; ConfigError listing each
    problem with its field path."""
    problems: list[str] = []

    def check(field: str | None, run: Callable[[], object]) -> None:
        try:
            run()
        except ValueError as error:  # ConfigError included
            problems.append(f"{field}: {error}" if field else str(error))

    models = {"model": config.model} if config.models is None else {f"models.{k}": v for k, v in config.models.items()}
    models.update({f"auxiliary_models.{name}": model for name, model in config.auxiliary_models.items()})
    for path, model in models.items():
        check(f"{path}.device", lambda device=model.device: _torch_device(device))
    algorithm = config.algorithm
    check("algorithm.algorithm_type", lambda: _estimator(algorithm.algorithm_type))
    before = len(problems)
    check("algorithm.loss_fn", lambda: _loss(algorithm.loss_fn))
    if len(problems) == before:  # the loss is known: its settings can be checked against it
        from ..engine.losses import check_loss_config

        check("algorithm.loss_fn_config", lambda: check_loss_config(algorithm.loss_fn, algorithm.loss_fn_config))
        if algorithm.entropy_target is not None:
            coefficient = {"entropy_coef": algorithm.entropy_target.initial_coef}
            check("algorithm.entropy_target", lambda: check_loss_config(algorithm.loss_fn, coefficient))
    for name, path in config.baselines.items():
        check(None, lambda name=name, path=path: import_policy(f"baselines.{name}", path))
    if config.league is not None:
        for name, path in config.league.scripted.items():
            check(None, lambda name=name, path=path: import_policy(f"league.scripted.{name}", path))
    for index, path in enumerate(config.step_hooks):
        check(None, lambda index=index, path=path: import_step_hook(f"step_hooks[{index}]", path))
    if problems:
        raise ConfigError("; ".join(problems), problems)


def _torch_device(value: str) -> None:
    import torch

    try:
        torch.device(value)
    except (RuntimeError, TypeError):
        raise ValueError(f"{value!r} is not a torch device; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from None


def _estimator(value: str) -> None:
    from ..algorithms import ADVANTAGE_ESTIMATORS, register_estimator

    if value in ADVANTAGE_ESTIMATORS:
        return
    if not is_import_path(value):
        raise ValueError(
            f"unknown advantage estimator {value!r}; choose one of {sorted(ADVANTAGE_ESTIMATORS)} "
            "or give the import path 'package.module:function' of one"
        )
    register_estimator(value, import_object(value))


def _loss(value: str) -> None:
    from ..engine.losses import LOSSES, advantage_weighted_losses, register_loss

    if value not in LOSSES and is_import_path(value):
        register_loss(value, import_object(value))
    choices = advantage_weighted_losses()
    if value not in choices:
        carry = "its datums carry target_tokens, logprobs and advantages, and train where the advantage is not 0"
        raise ValueError(
            f"loss_fn {value!r} is not a loss the RL loop trains with ({carry}); choose one of "
            f"{choices} or give the import path 'package.module:function' of one"
        )
