"""The league at run time: a pool of opponents, one drawn for every training episode, and the policy's record
against each.

`League` holds the pool that `league:` configures (`league_config.py`): frozen snapshots of the learner
(`LeagueSnapshot`, a LoRA copy on the learner's engine, also saved so a resumed run meets the same ones), scripted
opponents (a `ScriptedChatModel` per episode, seeded per episode) and frozen auxiliary models. Around one
training step:

- `refresh(step)` adds a snapshot when one is due and evicts past `max_snapshots`;
- `begin_step` draws every episode's opponent (`algorithms.opponent_sampling`, from the records as they stand,
  with an RNG seeded by the league seed and the step, so a run's draws are reproducible);
- `episode_fn(workflow)` wraps the workflow: it hands an episode its opponent and counts the outcome (and, with
  `baseline_per_opponent`, names the opponent as the episode's `baseline_group`);
- `end_step` returns the step's `league/...` metrics and folds its games into the records.

The workflow's side of it (the public API): the drawn opponent's name is `task["workflow_args"]["opponent"]`
(`OPPONENT_ARG`), its chat model `auxiliary_models[that name]` (play it with `.as_agent(seat, role=...)`), and the
workflow returns `WorkflowOutput(outcome="win" | "draw" | "loss")` from the learner's side. An episode that
reports no outcome is an error episode (kind 'bad_outcome'), never a silent gap in the records. A task marked
`"league": false` (`LEAGUE_TASK_KEY`) is played as it is: no opponent, no outcome asked, nothing recorded.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..algorithms import OUTCOMES, OpponentRecord, draw_opponents, draw_probabilities, eviction_choice
from ..clients import RemoteTrainingClient, TrainingClient
from ..rollout import ChatModel, FrozenChatModel, ScriptedChatModel, WorkflowOutput
from ..rollout.outcomes import EpisodeFault
from ..rollout.workflow import EpisodeFn, ModelRouter
from .imports import import_object
from .league_config import SNAPSHOT_PREFIX, LeagueConfig
from .workflow_args import OPPONENT_ARG

LEAGUE_TASK_KEY = "league"
"""A task with `"league": false` is no game against the pool (a puzzle, a drill mixed into the training data): the
league draws it no opponent and counts it in no record."""
SNAPSHOTS_BASELINE = f"{SNAPSHOT_PREFIX}*"
"""The baseline group of every game against a snapshot (`baseline_per_opponent`): the policy's recent past is one
opponent there, or most of those games would sit alone in their group."""


@dataclass
class LeagueSnapshot:
    """A frozen copy of the learner in the pool."""

    name: str
    """snapshot-<step>."""
    step: int
    """Optimizer steps the learner had taken when it was copied."""
    model: ChatModel
    """The copy, as the chat model its episodes play."""
    path: str | None
    """Its saved PEFT directory (checkpoints refer to it)."""


@dataclass
class _Draw:
    """One episode's drawn opponent."""

    name: str
    """The opponent's name in the pool."""
    seed: int
    """Seeds a scripted opponent's randomness for this episode where the episode has no sampling seed of its own."""


@dataclass
class League:
    """The opponent pool of one training run, the records against it and the draws of the current step."""

    config: LeagueConfig
    """What the pool holds and how it is drawn from."""
    client: TrainingClient | RemoteTrainingClient | None
    """The learner's training client: snapshots are taken from it (None: a pool without snapshots)."""
    sampling_defaults: dict
    """Sampling settings of the snapshots (the learner's)."""
    frozen: dict[str, ChatModel] = field(default_factory=dict)
    """The configured auxiliary models in the pool, by name."""
    snapshots: list[LeagueSnapshot] = field(default_factory=list)
    """Snapshots in the pool, oldest first."""
    records: dict[str, OpponentRecord] = field(default_factory=dict)
    """The learner's decayed record against every opponent in the pool."""
    scripted: dict[str, Callable] = field(init=False)
    """The scripted opponents' policies, by name (imported from `config.scripted`)."""
    _planned: dict[int, list[_Draw]] = field(default_factory=dict)
    _probabilities: dict[str, float] = field(default_factory=dict)
    _results: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scripted = {
            name: import_object(path) for name, path in self.config.scripted.items()
        }  # paths checked by the config

    def names(self) -> list[str]:
        """Every opponent in the pool: scripted, frozen models, then the snapshots oldest first."""
        return [*self.scripted, *self.frozen, *(snapshot.name for snapshot in self.snapshots)]

    def refresh(self, step: int, frozen: tuple[object, str, int] | None = None) -> None:
        """Add a snapshot of the learner at the start of `step` when one is due; evict past `max_snapshots`.

        The snapshot copies the weights that sample the step's rollout: the live ones, or `frozen` (a sampling
        client, its saved path and its weights version) when the rollout samples an older frozen version."""
        every = self.config.snapshot_every_steps
        name = f"{SNAPSHOT_PREFIX}{step}"
        if not every or step % every or any(snapshot.name == name for snapshot in self.snapshots):
            return
        if frozen is None:
            saved = self.client.save_weights_for_sampler(f"league-{name}")
            sampler = self.client.save_weights_and_get_sampling_client(
                kind="snapshot"
            )  # the same weights: calls run in order
            self._add_snapshot(name, step, sampler, saved.result().path)
        else:
            sampler, path, version = frozen
            self._add_snapshot(name, version, sampler, path)
        while len(self.snapshots) > self.config.max_snapshots:
            gone = eviction_choice(
                [s.name for s in self.snapshots], self.records, self.config.eviction, self.config.pfsp_power
            )
            self.snapshots = [s for s in self.snapshots if s.name != gone]
            self.records.pop(gone, None)

    def _add_snapshot(self, name: str, step: int, sampler, path: str | None) -> None:
        self.snapshots.append(
            LeagueSnapshot(name, step, FrozenChatModel(sampler, defaults=self.sampling_defaults, agent=name), path)
        )

    def probabilities(self) -> dict[str, float]:
        """The probability each opponent in the pool is drawn for an episode, from the records as they stand."""
        records = {name: self.records.get(name, OpponentRecord()) for name in self.names()}
        newest = self.snapshots[-1].name if self.snapshots else None
        return draw_probabilities(records, self.config.sampling, self.config.pfsp_power, newest)

    def begin_step(self, step: int, tasks: list[dict], group_size: int) -> None:
        """Draw the opponent of every episode of `step` (`group_size` per task; one per task when drawing per group)."""
        rng = random.Random(self.config.seed * 1_000_003 + step)
        self._probabilities = self.probabilities()
        self._planned, self._results = {}, []
        for task in filter(in_league, tasks):
            count = group_size if self.config.draw_per == "episode" else 1
            names = draw_opponents(self._probabilities, count, rng)
            names = names if count == group_size else names * group_size
            # An episode's task is the very dict of its group (the runner hands every episode of a task the same one).
            self._planned.setdefault(id(task), []).extend(_Draw(name, rng.randrange(2**31)) for name in reversed(names))

    def opponent(self, draw: _Draw) -> ChatModel:
        if draw.name in self.scripted:
            return ScriptedChatModel.seeded(
                self.scripted[draw.name], name=draw.name, seed=draw.seed, baseline=False
            ).as_agent(draw.name)
        if draw.name in self.frozen:
            return self.frozen[draw.name]
        return next(snapshot.model for snapshot in self.snapshots if snapshot.name == draw.name)

    def episode_fn(self, workflow: EpisodeFn) -> EpisodeFn:
        """`workflow` with this step's drawn opponent handed to each episode and its outcome counted."""

        async def play(task: dict, tuner: ModelRouter):
            if not in_league(task):
                return await workflow(task, tuner)
            planned = self._planned.get(id(task))
            if not planned:
                raise RuntimeError(
                    f"the league drew no opponent for task {task.get('task_id')!r}; call begin_step with "
                    "the step's tasks first"
                )
            draw = planned.pop()
            tuner.auxiliary_models = {
                **tuner.auxiliary_models,
                draw.name: self.opponent(draw),
            }  # a copy: the shared dict stays as it is
            output = await workflow(
                {**task, "workflow_args": {**task.get("workflow_args", {}), OPPONENT_ARG: draw.name}}, tuner
            )
            outcome = output.outcome if isinstance(output, WorkflowOutput) else None
            if outcome not in OUTCOMES:
                raise EpisodeFault(
                    "bad_outcome",
                    f"a league game must report WorkflowOutput.outcome, one of {OUTCOMES} from the "
                    f"learner's side; got {outcome!r} (opponent {draw.name!r})",
                )
            self._results.append((draw.name, outcome))
            if self.config.baseline_per_opponent and output.baseline_group is None:
                return dataclasses.replace(
                    output, baseline_group=SNAPSHOTS_BASELINE if draw.name.startswith(SNAPSHOT_PREFIX) else draw.name
                )
            return output

        return play

    def end_step(self) -> dict[str, float]:
        """The step's metrics (per opponent played: games and win/draw/loss rates; per pool member: its draw
        probability), after which the step's games join the decayed records."""
        metrics = {"league/pool_size": float(len(self.names())), "league/snapshots": float(len(self.snapshots))}
        metrics.update({f"league/{name}/draw_probability": p for name, p in self._probabilities.items()})
        games = Counter(name for name, _ in self._results)
        for name, count in games.items():
            outcomes = Counter(outcome for played, outcome in self._results if played == name)
            metrics[f"league/{name}/games"] = float(count)
            metrics.update({f"league/{name}/{outcome}_rate": outcomes[outcome] / count for outcome in OUTCOMES})
        for record in self.records.values():
            record.decay(self.config.record_decay)
        for name, outcome in self._results:
            if name in self.names():
                self.records.setdefault(name, OpponentRecord()).add(outcome)
        self._planned, self._results = {}, []
        return metrics

    def state_dict(self) -> dict:
        """The pool's snapshots (saved paths) and the records, for a checkpoint."""
        return {
            "snapshots": [{"name": s.name, "step": s.step, "path": s.path} for s in self.snapshots],
            "records": {name: [r.wins, r.draws, r.losses] for name, r in self.records.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore the pool and records a checkpoint saved (snapshots loaded from their saved adapters)."""
        self.snapshots = []
        for snapshot in state.get("snapshots", []):
            self._add_snapshot(
                snapshot["name"],
                snapshot["step"],
                self.client.create_sampling_client(snapshot["path"]),
                snapshot["path"],
            )
        self.records = {name: OpponentRecord(*counts) for name, counts in state.get("records", {}).items()}


def in_league(task: dict) -> bool:
    """Whether the league draws `task` an opponent (every task unless it says `"league": false`)."""
    return task.get(LEAGUE_TASK_KEY, True) is not False
