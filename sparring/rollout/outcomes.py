"""Episode outcomes, checked: what a workflow (or judge) returned, as finite numbers, or a named fault.

Whatever an episode returns is data for the step, never a reason for the run
to stop: `checked_outcome` turns a `WorkflowOutput` into rewards per agent,
metrics and turn rewards, all finite floats, and raises `EpisodeFault` with
one of `ERROR_KINDS` when something does not fit. The runner makes such an
episode (and one that raised or timed out) an error episode with the
penalty reward; the trainer logs the share of each kind as
`episode/error_kind/<kind>`.

A number is anything Python turns into a float by itself (int, float, bool,
numpy and 0-d torch scalars); a string is not, even "0.5".
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .types import JudgeOutput, WorkflowOutput
from .workflow import ModelRouter

ERROR_KINDS = {
    "exception": "the workflow (or the judge) raised",
    "timeout": "the episode ran past episode_timeout_s of its own time",
    "wrong_output_type": "the workflow returned something other than WorkflowOutput "
    "(or the judge other than JudgeOutput)",
    "bad_reward": "a reward is not a number (a string, a list, None without a judge) or misses a trainable agent",
    "nonfinite_reward": "a reward is nan or inf",
    "bad_metric": "a metric is not a finite number (a string, None, a list, nan, inf)",
    "bad_turn_rewards": "turn_rewards do not fit the trainable calls, or hold something that is not a finite number",
    "bad_outcome": "outcome is not 'win', 'draw' or 'loss' (or None), a league game reported none, "
    "or baseline_group is not a string",
}
"""Why an episode failed: kind -> what it means (the kinds of `Episode.error_kind`)."""
GAME_OUTCOMES = ("win", "draw", "loss")
"""What `WorkflowOutput.outcome` may be, besides None."""
SUCCESS_METRIC = "success_rate"
"""The metric `WorkflowOutput.is_success` becomes (1.0 or 0.0; averaged over a step's episodes as
`workflow/success_rate`)."""


class EpisodeFault(Exception):
    """An episode's outcome does not fit; `kind` is one of ERROR_KINDS."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class CheckedOutcome:
    """An episode's outcome as training uses it."""

    rewards: dict[str, float]
    """Reward per trainable agent."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The workflow's (and judge's, as `judge/<name>`) metrics."""
    turn_rewards: dict[str, list[float]] = field(default_factory=dict)
    """Per agent, the extra reward of each of its trainable calls."""
    reward: float | None = None
    """The one reward given for all trainable agents (kept when none spoke); None when it was given per agent."""
    baseline_group: str | None = None
    """`WorkflowOutput.baseline_group`, checked to be a string or None."""


async def checked_outcome(
    output: Any, task: dict, tuner: ModelRouter, judge: Callable | None, calls: Counter[str]
) -> CheckedOutcome:
    """Rewards, metrics and turn rewards of `output` for the agents with `calls` (trainable or scripted), checked."""
    if not isinstance(output, WorkflowOutput):
        raise EpisodeFault(
            "wrong_output_type",
            f"the workflow returned {type(output).__name__}; it must return WorkflowOutput(reward=..., metrics=...)",
        )
    reward, metrics = output.reward, _metrics(output.metrics, "")
    if output.is_success is not None:
        metrics[SUCCESS_METRIC] = _success(output.is_success)
    if output.outcome is not None and output.outcome not in GAME_OUTCOMES:
        raise EpisodeFault("bad_outcome", f"outcome is {output.outcome!r}; it must be None or one of {GAME_OUTCOMES}")
    if output.baseline_group is not None and not isinstance(output.baseline_group, str):
        raise EpisodeFault(
            "bad_outcome",
            f"baseline_group is {output.baseline_group!r} ({type(output.baseline_group).__name__}); it "
            "must be None or a string",
        )
    if reward is None:
        if judge is None:
            raise EpisodeFault("bad_reward", "the workflow returned reward=None and no judge_func is configured")
        judged = judge(task, output.response, tuner.workflow_auxiliary_models())
        judged = await judged if inspect.isawaitable(judged) else judged
        if not isinstance(judged, JudgeOutput):
            raise EpisodeFault(
                "wrong_output_type",
                f"the judge returned {type(judged).__name__}; it must return JudgeOutput(reward=..., metrics=...)",
            )
        reward = judged.reward
        metrics.update(_metrics(judged.metrics, "judge/"))
    agents = sorted(calls)
    if isinstance(reward, dict):
        missing = [agent for agent in agents if agent not in reward]
        if missing:
            raise EpisodeFault(
                "bad_reward", f"the reward dict {sorted(reward, key=str)} has no entry for trainable agents {missing}"
            )
        rewards = {agent: _reward(reward[agent], f"reward[{agent!r}]") for agent in agents}
        return CheckedOutcome(
            rewards, metrics, _turn_rewards(output.turn_rewards, calls), baseline_group=output.baseline_group
        )
    value = _reward(reward, "reward")
    return CheckedOutcome(
        {agent: value for agent in agents},
        metrics,
        _turn_rewards(output.turn_rewards, calls),
        reward=value,
        baseline_group=output.baseline_group,
    )


def _number(value: Any) -> float | None:
    """`value` as a float when Python converts it by itself (not parsing a string); None otherwise."""
    if isinstance(value, (str, bytes)) or not hasattr(type(value), "__float__"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):  # e.g. a tensor of several elements
        return None


def _reward(value: Any, name: str) -> float:
    number = _number(value)
    if number is None:
        raise EpisodeFault("bad_reward", f"{name} is {value!r} ({type(value).__name__}), not a number")
    if not math.isfinite(number):
        raise EpisodeFault("nonfinite_reward", f"{name} is {number}; rewards must be finite")
    return number


def _success(value: Any) -> float:
    number = _number(value)
    if number not in (0.0, 1.0):
        raise EpisodeFault(
            "bad_metric", f"is_success is {value!r} ({type(value).__name__}); it must be True, False or None"
        )
    return number


def _metrics(given: Any, prefix: str) -> dict[str, float]:
    if not isinstance(given, dict):
        raise EpisodeFault(
            "bad_metric",
            f"{prefix or 'workflow '}metrics is a {type(given).__name__}; it must be a dict of names to numbers",
        )
    checked = {}
    for key, value in given.items():
        number = _number(value)
        if number is None or not math.isfinite(number):
            raise EpisodeFault(
                "bad_metric",
                f"metric {prefix}{key} is {value!r} ({type(value).__name__}); metrics must be finite numbers",
            )
        checked[f"{prefix}{key}"] = number
    return checked


def _turn_rewards(given: Any, calls: Counter[str]) -> dict[str, list[float]]:
    """`WorkflowOutput.turn_rewards` as one checked list per agent, as long as that agent's trainable (or scripted)
    calls."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        if len(calls) != 1:
            raise EpisodeFault(
                "bad_turn_rewards",
                f"turn_rewards is one list but {len(calls)} trainable agents made calls ({sorted(calls)}); "
                "give a list per agent name",
            )
        given = {next(iter(calls)): given}
    checked = {}
    for agent, values in given.items():
        if agent not in calls:
            raise EpisodeFault(
                "bad_turn_rewards",
                f"turn_rewards names {agent!r}, which made no trainable call; agents with calls: {sorted(calls)}",
            )
        if not isinstance(values, (list, tuple)) or len(values) != calls[agent]:
            count = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
            raise EpisodeFault(
                "bad_turn_rewards",
                f"turn_rewards[{agent!r}] has {count} values but the agent made {calls[agent]} trainable calls",
            )
        numbers = [_number(value) for value in values]
        if any(number is None or not math.isfinite(number) for number in numbers):
            raise EpisodeFault(
                "bad_turn_rewards", f"turn_rewards[{agent!r}] holds a value that is not a finite number: {values}"
            )
        checked[agent] = numbers
    return checked
