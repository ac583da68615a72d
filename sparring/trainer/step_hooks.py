"""Step hooks: user code that runs at the two ends of every training step, on either schedule.

A `StepHook` is the public extension point of the step sequence
(`step_sequence.py`): `before_rollout` sees a step's tasks before a single
episode of it plays, `after_training` sees its metrics and episodes once its
update is done and may add metrics of its own, logged with the step's. Both
may be plain or `async` methods. The same hook runs on-policy and with
`algorithm.max_staleness` > 0: there the rollout of step k may begin
before step k - 1 has trained (`StepStart.weights_version` says which
weights sample it), and `after_training` still comes once per step, in step
order. Hooks are given to `run_training(..., hooks=[...])` or `tune(...,
step_hooks=[...])` as objects, or in a config as import paths of classes
built with no arguments (`step_hooks:`). An error in a hook stops the run
(after the checkpoint of the last completed step), as any error of the
trainer's own does.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .imports import import_field

if TYPE_CHECKING:
    from ..rollout import Episode

HOOK_METHODS = ("before_rollout", "after_training")


@dataclass(frozen=True)
class StepStart:
    """A training step about to play its rollout."""

    step: int
    """The step's index, from 0 (the checkpoint after it is `step + 1`)."""
    tasks: list[dict]
    """The batch of tasks the rollout plays, each `group_size` times."""
    weights_version: int
    """Optimizer steps of the weights that sample the rollout: `step` on-policy, less with `max_staleness` > 0."""
    snapshot_ages: dict[str, float]
    """`snapshot/<name>/age_steps` of the snapshot opponents the rollout plays against."""


@dataclass(frozen=True)
class StepEnd:
    """A training step whose update is done, before it is logged."""

    step: int
    """The step's index, from 0."""
    metrics: dict[str, float]
    """What the step logs (read-only here: return a dict from `after_training` to add metrics)."""
    episodes: list[Episode]
    """The episodes it trained on, grouped by task."""


class StepHook:
    """Base class of a step hook: override either method; both do nothing here."""

    def before_rollout(self, start: StepStart) -> None:
        """Called once per step before its first episode plays."""

    def after_training(self, end: StepEnd) -> dict[str, float] | None:
        """Called once per step after its optimizer step; a returned dict is logged with the step's metrics."""
        return None


async def call_hook(method, argument) -> dict[str, float] | None:
    """Call a hook's method, awaiting it when it is async."""
    result = method(argument)
    return await result if inspect.isawaitable(result) else result


def import_step_hook(field: str, import_path: str) -> Any:
    """The hook class (or hook object) at `import_path`; a ValueError naming `field` when it is neither."""
    hook = import_field(field, import_path)
    if not any(callable(getattr(hook, method, None)) for method in HOOK_METHODS):
        raise ValueError(
            f"{field}: {import_path!r} has neither `before_rollout` nor `after_training`; a step hook is a "
            "StepHook subclass (sparring.StepHook)"
        )
    if isinstance(hook, type):
        try:
            inspect.signature(hook).bind()
        except TypeError:
            raise ValueError(
                f"{field}: the class {import_path!r} needs constructor arguments; a hook named in a config "
                "is built with none (pass a built one to tune(step_hooks=...))"
            ) from None
    return hook


def build_step_hooks(import_paths: list[str]) -> list[StepHook]:
    """The config's hooks, built: a class is instantiated with no arguments, an object is used as it is."""
    hooks = [import_step_hook(f"step_hooks[{index}]", path) for index, path in enumerate(import_paths)]
    return [hook() if isinstance(hook, type) else hook for hook in hooks]
