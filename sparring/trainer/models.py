"""The models of one training run: trainable policies, frozen auxiliary models, snapshots, the league's opponents.

`TrainingModels` holds one LoRA training client per trainable model (all on one shared engine when they share a
base model, built by `resolve.build_models`), the chat models that workflows call (`PolicyChatModel` on each live
adapter, frozen local or OpenAI-compatible models for the auxiliary ones), and applies one update: `forward_backward`
for every model first, then every `optim_step`, so the engine runs them back to back. Every model runs on a backend
chosen by `TunerModelConfig.backend`: 'local' (an engine in this process) or 'tinker' (a Tinker-protocol service).
Both hand out clients with the same interface, so nothing here knows which one it has.

A `Snapshot` is an auxiliary model that is a frozen copy of a trainable adapter (`TunerModelConfig.snapshot_of`): it
lives on the same engine as its source, so only the LoRA matrices are copied, never the base weights.
`refresh_snapshots` retakes it every `snapshot_interval_steps` and saves it as a PEFT directory, which the checkpoint
refers to, so a resumed run plays against exactly the same snapshot. When rollouts run ahead of training
(`algorithm.max_staleness`, `pipeline.py`), `frozen_tuner` hands workflows policies that sample a frozen older copy
of the weights (recorded and trained under their own model keys), and snapshots are retaken from that copy
(`install_snapshot`) rather than from the live weights.

`PrefillMeter` reads the `prefill_counts` of the in-process engines the models sample on (models on a service report
none) and hands out what was added since its last reading, as the `engine/prompt_tokens`, `engine/prefilled_tokens`
and `engine/prefix_hit_rate` metrics of a step or an evaluation. The counts are the engines' own, so with rollouts
running ahead a reading can hold some of a neighbouring step's calls.

`League` is the pool that `league:` configures, one opponent drawn for every training episode, and the policy's
record against each: frozen snapshots of the learner (`LeagueSnapshot`, a LoRA copy on the learner's engine, also
saved so a resumed run meets the same ones), scripted opponents (a `ScriptedChatModel` per episode, seeded per
episode) and frozen auxiliary models. Around one training step: `refresh(step)` adds a snapshot when one is due and
evicts past `max_snapshots`; `begin_step` draws every episode's opponent (`algorithms.opponent_sampling`, with an RNG
seeded by the league seed and the step, so a run's draws are reproducible); `episode_fn(workflow)` hands an episode
its opponent and counts the outcome (with `baseline_per_opponent`, naming the opponent as the episode's
`baseline_group`); `end_step` returns the step's `league/...` metrics and folds its games into the records. The
workflow's side (the public API): the drawn opponent's name is `task["workflow_args"]["opponent"]` (`OPPONENT_ARG`),
its chat model `auxiliary_models[that name]`, and the workflow returns `WorkflowOutput(outcome="win" | "draw" |
"loss")` from the learner's side; an episode that reports no outcome is an error episode (kind 'bad_outcome'). A
task marked `"league": false` (`LEAGUE_TASK_KEY`) is played as it is: no opponent, no outcome asked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..algorithms import OUTCOMES, OpponentRecord, draw_opponents, draw_probabilities, eviction_choice
from ..clients import RemoteTrainingClient, SamplingClient, TrainingClient
from ..engine import Engine
from ..engine.prefix_cache import PrefillCounts
from ..integrations import TunerHandle
from ..rollout import ChatModel, FrozenChatModel, PolicyChatModel, ScriptedChatModel, WorkflowOutput
from ..rollout.outcomes import EpisodeFault
from ..rollout.workflow import EpisodeFn, ModelRouter
from ..types import AdamParams, Datum, ForwardBackwardOutput
from .config import TunerModelConfig
from .config_file import import_object
from .schema import OPPONENT_ARG
from .sections import SNAPSHOT_PREFIX, LeagueConfig


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of step `step` in a run seeded `seed` (its rollouts', and its requests' without a seed)."""
    return seed * 1_000_003 + step


@dataclass
class Snapshot:
    """A frozen copy of a trainable adapter, served as an auxiliary model."""

    source: str
    """Key of the trainable model it copies."""
    interval: int
    """Retake it every this many steps; 0 never."""
    config: TunerModelConfig
    """Its auxiliary-model config (sampling settings)."""
    step: int = 0
    """The training step at whose start it was taken (its source had made `step` optimizer steps)."""
    path: str | None = None
    """Its saved PEFT directory; None until training has saved it (checkpoints refer to it)."""


def sampler_learner_gap(datums: list[Datum], output: ForwardBackwardOutput) -> float | None:
    """Largest |learner logprob - sampler logprob| over the trained tokens (non-zero advantage); None when the learner
    reports no logprobs. Near 0 when the step trains the weights that sampled (float rounding only), constrained
    positions included: a learner that forgot a constraint's renormalisation shows up here."""
    gaps = []
    for datum, record in zip(datums, output.loss_fn_outputs, strict=True):
        if "logprobs" not in record:
            return None
        trained_N = datum.loss_fn_inputs["advantages"].to_torch() != 0
        if trained_N.any():
            gap_N = (record["logprobs"].to_torch() - datum.loss_fn_inputs["logprobs"].to_torch()).abs()[trained_N]
            gap_N = gap_N[~gap_N.isnan()]  # a custom loss's gradient mask need not be the advantages'
            if len(gap_N):
                gaps.append(float(gap_N.max()))
    return max(gaps, default=0.0)


@dataclass
class TrainingModels:
    """Trainable clients, the chat models handed to workflows, and the base-model sampler."""

    clients: dict[str, TrainingClient | RemoteTrainingClient]
    """Training client per trainable model key (local or on a service)."""
    policies: dict[str, PolicyChatModel]
    """Chat model on each live adapter, per key."""
    auxiliary: dict[str, ChatModel] = field(default_factory=dict)
    """Frozen models by config name."""
    base_sampler: SamplingClient | None = None
    """The first trainable model's base model, for the KL penalty."""
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    """Auxiliary models that are snapshots of a trainable model, by config name."""
    league: League | None = None
    """The opponent pool training episodes draw from (`league:` in the config); None without one."""
    rollout_temperature_floor: float = 0.0
    """Training rollouts sample the trainable models at no lower temperature (`algorithm.rollout_temperature_floor`)."""
    rollout_exploration: float = 0.0
    """Training rollouts draw this share of each constrained token uniformly (`algorithm.exploration`, raised while
    the collapse response acts)."""

    @property
    def tokenizer(self):
        return next(iter(self.clients.values())).get_tokenizer()

    def make_tuner(self) -> TunerHandle:
        return TunerHandle(policies=self.policies, auxiliary_models=self.auxiliary)

    def make_training_tuner(self) -> TunerHandle:
        """The handle a training rollout's episode gets: its policies sample at `rollout_temperature_floor` or above,
        exploring `rollout_exploration`."""
        return TunerHandle(policies=self._exploring(self.policies), auxiliary_models=self.auxiliary)

    def _exploring(self, policies: dict[str, PolicyChatModel]) -> dict[str, PolicyChatModel]:
        if not self.rollout_temperature_floor and not self.rollout_exploration:
            return policies
        settings = {"temperature_floor": self.rollout_temperature_floor, "exploration": self.rollout_exploration}
        return {key: dataclasses.replace(policy, **settings) for key, policy in policies.items()}

    def release(self) -> None:
        """Free the trainable adapters and their optimizer state on the process-wide engines once the run is over.

        Their weights are saved by then; without this every run in one process (a sweep, a notebook, the learning
        suite) would leave its adapters on the shared base model."""
        for client in self.clients.values():
            if isinstance(client, TrainingClient):
                client.release().result()

    def local_engines(self) -> list[Engine]:
        """Every distinct in-process engine the models sample on (models on a service have none)."""
        samplers = [
            *self.clients.values(),
            self.base_sampler,
            *(getattr(model, "sampler", None) for model in self.auxiliary.values()),
        ]
        engines = [getattr(sampler, "engine", None) for sampler in samplers]
        return list({id(engine): engine for engine in engines if isinstance(engine, Engine)}.values())

    async def empty_prefix_caches(self) -> None:
        """Empty the engines' prefix caches: every step starts from none, so a resumed run samples as the uninterrupted
        one did (a frozen model's cached prefixes would otherwise outlive the step that computed them)."""
        await asyncio.gather(*(asyncio.wrap_future(engine.empty_prefix_cache()) for engine in self.local_engines()))

    def reseed(self, seed: int, step: int) -> None:
        """Restart the engines' streams for requests that carry no seed (a workflow's raw sampler calls)."""
        for client in self.clients.values():
            client.reseed(step_seed(seed, step))

    async def update(
        self, datums: dict[str, list[Datum]], loss_fn: str, loss_fn_config: dict | None, adam_params: AdamParams
    ) -> dict[str, float]:
        """One optimizer step for every model that has data."""
        keys = [key for key in self.clients if datums.get(key)]
        # logprobs are read at trained tokens only (`sampler_learner_gap`): no LM head elsewhere
        passes = [
            self.clients[key].forward_backward(datums[key], loss_fn, loss_fn_config, untrained_logprobs=False)
            for key in keys
        ]
        steps = [self.clients[key].optim_step(adam_params) for key in keys]
        metrics: dict[str, float] = {}
        for key, output, step in zip(keys, await asyncio.gather(*passes), await asyncio.gather(*steps), strict=True):
            prefix = "train" if len(self.clients) == 1 else f"train/{key}"
            metrics[f"{prefix}/loss"] = output.loss
            if "grad_norm" in step.metrics:  # a remote service need not report it
                metrics[f"{prefix}/grad_norm"] = step.metrics["grad_norm"]
            metrics[f"{prefix}/datums"] = float(len(datums[key]))
            gap = sampler_learner_gap(datums[key], output)
            if gap is not None:
                metrics[f"{prefix}/sampler_logprob_gap"] = gap
        return metrics

    def frozen_tuner(self, samplers: dict, training: bool = False) -> Callable[[], TunerHandle]:
        """Tuner handles whose trainable models sample from `samplers` (frozen weights, per model key) and are recorded
        and trained under their own keys; the auxiliary models are the ones in play now. For a `training` rollout the
        policies sample at `rollout_temperature_floor` or above, exploring `rollout_exploration`."""
        policies = {key: dataclasses.replace(policy, sampler=samplers[key]) for key, policy in self.policies.items()}
        policies = self._exploring(policies) if training else policies
        auxiliary = dict(self.auxiliary)
        return lambda: TunerHandle(policies=policies, auxiliary_models=auxiliary)

    def due_snapshots(self, step: int, version: int) -> list[str]:
        """The snapshots to retake before the rollout of `step`, whose policy samples the weights of `version` steps:
        those this run has not saved yet, and those due every `interval` steps that do not hold `version` already."""
        return [
            name
            for name, s in self.snapshots.items()
            if s.path is None or (s.interval and step % s.interval == 0 and s.step != version)
        ]

    def snapshot_ages(self, version: int) -> dict[str, float]:
        """How many optimizer steps each snapshot lags the policy that samples the weights of `version` steps."""
        return {
            f"snapshot/{name}/age_steps": float(version - snapshot.step) for name, snapshot in self.snapshots.items()
        }

    def refresh_snapshots(self, step: int) -> dict[str, float]:
        """Retake (and save) every snapshot that is due at the start of `step` from the live weights; returns each
        one's age in steps."""
        for name in self.due_snapshots(step, step):
            client = self.clients[self.snapshots[name].source]
            saved = client.save_weights_for_sampler(f"snapshot-{name}-step-{step:06d}")
            sampler = client.save_weights_and_get_sampling_client(kind="snapshot")  # same weights: calls run in order
            self.install_snapshot(name, sampler, saved.result().path, step)
        return self.snapshot_ages(step)

    def load_snapshot(self, name: str, path: str, step: int) -> None:
        """Use the snapshot saved at `path` (taken at `step`) as auxiliary model `name`."""
        if name not in self.snapshots:
            raise ValueError(
                f"no snapshot auxiliary model {name!r} in this run; snapshots are {sorted(self.snapshots)}"
            )
        self.install_snapshot(name, self.clients[self.snapshots[name].source].create_sampling_client(path), path, step)

    def install_snapshot(self, name: str, sampler: SamplingClient, path: str | None, step: int) -> None:
        """Serve `sampler` (weights saved at `path`, `step` optimizer steps old) as snapshot opponent `name`."""
        snapshot = self.snapshots[name]
        self.auxiliary[name] = FrozenChatModel(sampler, defaults=snapshot.config.sampling_params(), agent=name)
        snapshot.path, snapshot.step = path, step

    def save_for_sampler(self, name: str) -> dict[str, str]:
        futures = {key: client.save_weights_for_sampler(name) for key, client in self.clients.items()}
        return {key: future.result().path for key, future in futures.items()}


T = TypeVar("T")


class PrefillMeter:
    """The prefill counts of a run's local engines, read step by step (an evaluation inside a step apart)."""

    def __init__(self, models: TrainingModels):
        self.engines = models.local_engines()
        """Every distinct in-process engine the models use."""
        self._read = self._total()

    def take(self) -> PrefillCounts:
        """What the engines prefilled since the last `take`."""
        total = self._total()
        taken, self._read = total - self._read, total
        return taken

    async def apart(self, work: Awaitable[T]) -> tuple[T, PrefillCounts]:
        """Await `work` (an evaluation inside a step) and return what it prefilled, leaving the step's own counts for
        the step's next `take`."""
        step_so_far = self.take()
        result = await work
        counts = self.take()
        self._read = self._read - step_so_far
        return result, counts

    def _total(self) -> PrefillCounts:
        total = PrefillCounts()
        for engine in self.engines:
            total = total + engine.prefill_counts
        return total


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
