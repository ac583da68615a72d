"""The nouns of an episode: what a workflow returns, what a model call records,
and what an episode leaves for training.

A workflow returns `WorkflowOutput` (or a judge returns `JudgeOutput`); every
trainable model call inside it becomes a `ModelCall` on the episode's
recorder; calls are merged into `Timeline`s (one token sequence per agent
conversation, completions loss-masked in); an `Episode` bundles an agent's
timelines with the rewards, metrics and error of one run of the workflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REPORTED_ERROR_METRIC = "error"
"""A workflow metric that, at 1 (or more), reports the episode failed: it counts as failed (the failing-streak stop
included) while its reward and metrics are kept as the workflow gave them."""
REPORTED_ERROR_KIND = "reported_error"
"""The failure kind of an episode whose workflow reported `REPORTED_ERROR_METRIC`."""


@dataclass
class WorkflowOutput:
    """What one episode of a workflow returns."""

    reward: float | dict[str, float] | None = None
    """One reward for every trainable agent, a reward per agent name, or None to ask the judge."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Scalars to log (averaged over episodes as `workflow/<name>`)."""
    response: Any = None
    """The episode's final answer, handed to the judge."""
    turn_rewards: list[float] | dict[str, list[float]] | None = None
    """Per-turn credit: an extra reward for each trainable call, in call order (a list when one agent learns, else a
    list per agent name). Call t is then credited with the episode reward plus the turn rewards from t on."""
    is_success: bool | None = None
    """Whether the episode succeeded (AgentJet's flag); when given it is logged as the metric
    `workflow/success_rate`."""
    outcome: str | None = None
    """A game's result from the trained side: 'win', 'draw' or 'loss'. A league (`league:` in a config) needs it to keep
    the policy's record against each opponent; elsewhere it is optional."""
    baseline_group: str | None = None
    """Narrows who this episode is compared with: the episodes of its task share an advantage baseline only with those
    of the same `baseline_group` (e.g. the opponent it met; a league with `baseline_per_opponent` sets it). None: the
    whole task group."""


@dataclass
class JudgeOutput:
    """What a judge returns for an episode whose workflow gave no reward."""

    reward: float | dict[str, float]
    """One reward for every trainable agent, or a reward per agent name."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Scalars to log (as `judge/<name>`)."""


@dataclass
class ModelCall:
    """One call of a trainable model, as sampled: the exact tokens and the sampler's logprobs."""

    agent: str
    """Name of the agent that made the call."""
    model: str
    """Key of the trainable model (adapter) that sampled it."""
    prompt_tokens: list[int]
    """The rendered prompt."""
    completion_tokens: list[int]
    """The sampled tokens, as sampled (never re-tokenised)."""
    logprobs: list[float]
    """Sampler log-probability of each completion token."""
    allowed_tokens: list[list[int]] = field(default_factory=list)
    """Per completion token, the encoded set a constraint allowed there ([] where none); empty for an unconstrained
    call."""
    behaviour_logprobs: list[float] = field(default_factory=list)
    """Per completion token, its logprob under the distribution it was drawn from (exploration, a raised temperature);
    empty when that was the model's own, `logprobs`."""


@dataclass
class Timeline:
    """One training sequence: merged calls of one agent, completions marked for loss."""

    agent: str
    """Name of the agent."""
    model: str
    """Key of the trainable model that produced the completions."""
    tokens: list[int]
    """The full token sequence (prompt, completion, next prompt part, completion, ...)."""
    loss_mask: list[int]
    """1 where the token was sampled by the policy (trained on), 0 elsewhere; len == len(tokens)."""
    logprobs: list[float]
    """Sampler logprob where loss_mask is 1, 0.0 elsewhere; len == len(tokens)."""
    num_calls: int = 1
    """How many model calls were merged into this sequence."""
    call_index: list[int] = field(default_factory=list)
    """Per token, which of the agent's calls (0-based, in call order) sampled it; -1 on prompt tokens. Lets
    per-turn credit reach the right completion span; empty on hand-built timelines that need none."""
    allowed_tokens: list[list[int]] = field(default_factory=list)
    """Per token, the encoded set a constraint allowed when it was sampled ([] where none: prompt tokens, free
    text); empty when no call of the timeline was constrained. The learner renormalises over these sets."""
    log_importance_weight: float = 0.0
    """Sum over the sampled tokens of log p(model) - log q(drawn from): how much likelier the model's own
    distribution makes them than the rollout's wider one (0 when they were drawn from the model's own)."""


@dataclass
class Episode:
    """One finished run of a workflow on a task, ready for advantage estimation."""

    task: dict
    """The task the workflow ran on (workflow_args merged in)."""
    group: int
    """Index of the task within the step: episodes of one group share a baseline."""
    timelines: list[Timeline]
    """Every trainable agent's merged sequences."""
    rewards: dict[str, float]
    """Reward per trainable agent name (a scalar reward is given to every agent that made calls)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Workflow and judge metrics."""
    roles: dict[str, str] = field(default_factory=dict)
    """Agent name -> role (its target_tag); agents of one role share an advantage group."""
    error: str | None = None
    """Why the episode failed (exception, timeout, an outcome that does not fit); its agents then get the penalty
    reward."""
    error_kind: str | None = None
    """The kind of failure, one of `rollout.outcomes.ERROR_KINDS` ('exception', 'timeout', 'nonfinite_reward', ...)."""
    transcripts: dict[str, list[dict]] = field(default_factory=dict)
    """Per agent, the messages and replies of every call (trainable and frozen), for logs and debug mode."""
    num_calls: int = 0
    """Trainable model calls made (before merging)."""
    turn_rewards: dict[str, list[float]] = field(default_factory=dict)
    """Per agent, the extra reward of each of its calls (`WorkflowOutput.turn_rewards`); empty without per-turn
    credit."""
    reward: float | None = None
    """The one reward the workflow (or judge) gave for all trainable agents, kept even when none of them spoke;
    None when it gave a reward per agent, or the episode failed."""
    baseline_group: str | None = None
    """`WorkflowOutput.baseline_group`: within its task group, the episode shares a baseline only with episodes of the
    same value (None: the whole group; a failed episode keeps None)."""

    @property
    def failed(self) -> bool:
        """The episode raised, timed out or returned an outcome that does not fit, or the workflow reported its own
        `error` metric of 1 (or more)."""
        return self.error is not None or self.metrics.get(REPORTED_ERROR_METRIC, 0.0) >= 1.0

    @property
    def failure(self) -> tuple[str, str] | None:
        """(kind, reason) of a failed episode: its error kind and error, or 'reported_error' for a workflow-reported
        failure; None when it did not fail."""
        if self.error is not None:
            return self.error_kind or "exception", self.error
        if self.failed:
            return (
                REPORTED_ERROR_KIND,
                f"the workflow reported {REPORTED_ERROR_METRIC}={self.metrics[REPORTED_ERROR_METRIC]:g}",
            )
        return None
