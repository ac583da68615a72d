"""The run loop and the step sequence: every step is begin -> rollout on a `RolloutWeights` -> learn -> finish, at any
staleness.

`StepSequence` is what every step does around its rollout and its update, written once. `begin` opens a step: a
pending stop signal ends the run here, the snapshot opponents due are retaken and the league's snapshot is taken,
the held-out tasks are evaluated when due (`HeldOut`), the weights are validated when due and kept as `best` when
they play best (`BestAdapter`), the sampler is reseeded, the next batch of tasks is taken, and the step hooks see it.
`finish` closes it after its update: failing, untrained and collapsing steps are warned about (`safeguards.py`), the
hooks see the step, it is logged and shown, and the next step's resume point is recorded (`ResumePoints`). Each
collaborator is called once a phase, so a step's data goes down through them and comes back.

`RunLoop` is a two-stage pipeline in one event loop. The producer begins each step and plays its rollout, one step
after another; the trainer takes the rollouts in order, learns from each (`step.learn`), finishes the step, writes
the checkpoint when due, and releases the next weights version. The rollout of step k samples `version_of(k) =
max(k - N, b)` of every trainable model, N = `algorithm.max_staleness` (version j = the weights after j optimizer
steps; b = the latest barrier at or before k: an evaluation or a validation step, whose weights must be the trained
ones). When that version is k the rollout waits for step k - 1 to finish: with N = 0 that is every step, the
on-policy schedule, and the rollout samples the live weights (`LiveWeights`). A version that a later rollout samples
while newer steps train is frozen when it is reached (`FrozenWeights`: saved as sampler weights and copied in
memory), so the rollout of k starts while the steps up to k - 1 still train; a version no later rollout needs is
never copied. The loss's importance ratio uses the sampler logprobs recorded with every token, so the PPO / CISPO
clip accounts for the lag; every step logs `staleness/mean` and `staleness/max` (from the version each episode
recorded). A league plays in the producer: its opponents are drawn before the rollout and its games counted after it,
and its snapshots copy the weights that sample the step's rollout.

Why a fixed lag rather than "the newest weights there are": which weights sample each rollout is then a function of
the config alone, so a run is reproducible and a resumed run is the same run. For the same reason rollouts never
overlap one another, only training: the sampler's seed stream, the task stream and the global RNGs advance in the
order of an uninterrupted run. Evaluations and validations are barriers: the one before step s waits for the weights
of step s and runs with no rollout in flight.

Resume: a step whose rollout runs ahead records its resume point when the producer reaches it; any other step's is
recorded when the step before finishes. The checkpoint after step s saves the one of step s, with the saved paths of
the older versions that rollouts s, s + 1, ... sample; the resumed run reloads them and redoes the rollouts that were
in flight. Saved versions that nothing needs any more are deleted (local ones; a service keeps its own). On the local
engine the overlap is interleaving, not parallel compute: one worker runs the model, and the pipeline hides
everything else -- workflow code, batching windows, advantage and datum assembly, logging, checkpoints -- behind the
model's work; a service that samples and trains on separate workers overlaps the two themselves.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..integrations import TunerHandle
from ..logging import MetricsLogger, RolloutWriter, TrainingProgress
from ..rollout import Episode
from .checkpoints import ResumePoints, prune_unresumable
from .evaluation import BestAdapter, HeldOut
from .models import PrefillMeter, TrainingModels
from .resolve import ResolvedRun
from .safeguards import FailureStreak, TrainingSignal
from .step import StepEnd, StepHook, StepStart, call_hook, learn, run_rollout

if TYPE_CHECKING:
    from .safeguards import StopSignals

log = logging.getLogger(__name__)


@dataclass
class FrozenVersion:
    """Every trainable model's weights after some number of optimizer steps, kept for the rollouts that sample them."""

    paths: dict[str, str]
    """Per model key, the saved sampler weights (what checkpoints and snapshot opponents refer to)."""
    samplers: dict
    """Per model key, a sampling client on a frozen copy of those weights."""


@dataclass
class FrozenWeights:
    """A frozen older version as a rollout samples it."""

    models: TrainingModels
    """The run's models (snapshot opponents are installed there)."""
    version: int
    """Optimizer steps of the frozen weights."""
    frozen: FrozenVersion
    """The weights."""

    def tuner_factory(self, training: bool) -> Callable[[], TunerHandle]:
        return self.models.frozen_tuner(self.frozen.samplers, training=training)

    async def retake_snapshots(self, step: int) -> None:
        """Retake the snapshot opponents due at `step`, and the league's snapshot, from the frozen weights, as the
        live weights do from themselves."""
        for name in self.models.due_snapshots(step, self.version):
            source = self.models.snapshots[name].source
            path = self.frozen.paths[source]
            sampler = await asyncio.to_thread(self.models.clients[source].create_sampling_client, path)
            self.models.install_snapshot(name, sampler, path, self.version)
        league = self.models.league
        if league is not None:
            learner = next(key for key, client in self.models.clients.items() if client is league.client)
            league.refresh(step, (self.frozen.samplers[learner], self.frozen.paths[learner], self.version))


@dataclass
class Rollout:
    """One step's finished rollout, as the producer hands it to the trainer."""

    episodes: list[Episode]
    """The step's episodes, grouped by task."""
    versions: list[int]
    """Per episode, optimizer steps of the weights that sampled its trainable calls."""
    seconds: float
    """How long the episodes took to play."""
    metrics: dict[str, float] = field(default_factory=dict)
    """`snapshot/<name>/age_steps` of the snapshot opponents they played against, and the league's games."""


class RunLoop:
    """Every training step of a run: rollouts on the weights `max_staleness` optimizer steps back (0: the live ones,
    on-policy), trained in order."""

    def __init__(self, sequence: StepSequence, saved_versions: dict[int, dict[str, str]]):
        """`sequence`: the run's step phases (begun in the producer, finished in order by the trainer);
        `saved_versions`: the older weights the resumed checkpoint names."""
        self.sequence = sequence
        self.resolved = sequence.run
        self.run_dir = sequence.run_dir
        self.models = sequence.models
        self.algorithm = sequence.algorithm
        self.start_step = sequence.record.steps
        self.saved_versions = saved_versions
        self.oldest_version = min(saved_versions, default=self.start_step)
        """No rollout samples older weights than these: a checkpoint written on-policy names none older than its
        step."""
        self.total_steps = self.resolved.stream.num_steps
        self.versions: dict[int, FrozenVersion] = {}
        """Frozen versions some rollout, snapshot or checkpoint may still need."""
        self._ready: dict[int, asyncio.Future] = {}
        self._finished: dict[int, asyncio.Future] = {}
        self._checkpointed: set[int] = set()
        self._checkpointed_snapshots: set[str] = set()

    def is_barrier(self, step: int) -> bool:
        """Whether the rollout of `step` must sample the trained weights of `step`: an evaluation or a validation of
        them runs before it."""
        sequence = self.sequence
        evaluation = sequence.held_out.evaluates and sequence.run.config.evaluation.evaluates_before(step)
        validation = sequence.best is not None and sequence.best.config.due(step, self.total_steps)
        return bool(evaluation or validation)

    def version_of(self, step: int) -> int:
        """The weights version that samples the rollout of `step`: `max_staleness` behind, never before a barrier."""
        lag = self.algorithm.max_staleness
        barrier = next((s for s in range(step, step - lag, -1) if self.is_barrier(s)), step - lag)
        return max(step - lag, barrier, self.oldest_version)

    def pending_versions(self, step: int) -> dict[int, dict[str, str]]:
        """The older weights that rollouts from `step` on sample, as the checkpoint after `step` steps names them."""
        pending = range(self.version_of(step), step)
        # A version not loaded yet (the run stopped while starting) is still where the resumed checkpoint named it.
        saved = {
            version: self.versions[version].paths if version in self.versions else self.saved_versions[version]
            for version in pending
        }
        self._checkpointed = set(pending)
        point = self.sequence.points.reached[step]
        self._checkpointed_snapshots = {snapshot["path"] for snapshot in point.snapshots.values()}
        self._checkpointed_snapshots |= {snapshot["path"] for snapshot in point.league.get("snapshots", [])}
        return saved

    def checkpoint(self, steps: int) -> Path:
        """Write the checkpoint after `steps` steps, naming the older weights the rollouts from there sample."""
        return self.sequence.points.checkpoint(steps, self.pending_versions(steps))

    async def run(self) -> None:
        """Train every remaining step, each rollout on the weights `version_of` its step."""
        for version, paths in self.saved_versions.items():
            samplers = {
                key: await asyncio.to_thread(self.models.clients[key].create_sampling_client, path)
                for key, path in paths.items()
            }
            self._offer(version, FrozenVersion(paths, samplers))
        await self._release(self.start_step)
        producer = asyncio.create_task(self._produce())
        save_every = self.resolved.config.checkpoints.interval_steps
        try:
            last_step_ended = time.perf_counter()
            for step in range(self.start_step, self.total_steps):
                waiting = time.perf_counter()
                rollout = await self.sequence.stop.cancelling(self._rollout(step, producer))
                waited = time.perf_counter() - waiting
                metrics = await learn(
                    rollout.episodes,
                    self.models,
                    self.resolved.settings,
                    self.resolved.config,
                    self.sequence.rollouts,
                    step,
                    self.total_steps,
                    self.sequence.entropy,
                    self.sequence.collapse,
                )
                ages = [step - version for version in rollout.versions] or [step - self.version_of(step)]
                metrics.update(rollout.metrics)
                metrics.update(
                    {
                        "staleness/mean": sum(ages) / len(ages),
                        "staleness/max": float(max(ages)),
                        "time/rollout": rollout.seconds,
                        "time/wait_rollout": waited,
                    }
                )
                metrics["time/step"] = time.perf_counter() - last_step_ended  # the step's share of the run's wall time
                last_step_ended = time.perf_counter()
                stopping = await self.sequence.finish(step, metrics, rollout.episodes)
                if save_every and (step + 1) % save_every == 0:
                    # off the event loop, so rollouts running ahead go on while it is written
                    await asyncio.to_thread(self.checkpoint, step + 1)
                if stopping:
                    return
                self.sequence.stop.check()
                if step + 1 < self.total_steps:
                    await self._release(step + 1)
                if self._forget_before(self.version_of(step + 1)):
                    prune_unresumable(self.run_dir)  # the checkpoints that named the deleted weights go with them
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    async def _rollout(self, step: int, producer: asyncio.Task) -> Rollout:
        """Rollout `step` once the producer has it; the producer's error if it failed first."""
        finished = self._future(self._finished, step)
        await asyncio.wait({finished, producer}, return_when=asyncio.FIRST_COMPLETED)
        if finished.done():
            return self._finished.pop(step).result()
        producer.result()
        raise RuntimeError(f"the rollout producer stopped before step {step + 1}")

    async def _produce(self) -> None:
        run, league = self.resolved, self.models.league
        for step in range(self.start_step, self.total_steps):
            version = self.version_of(step)
            if version < step:  # runs ahead: the trainer may checkpoint this step while it is in flight
                self.sequence.points.reach(step)
            frozen = await self._future(self._ready, version)  # None: not frozen, the live weights are that version
            weights: RolloutWeights = (
                LiveWeights(self.models, step) if frozen is None else FrozenWeights(self.models, version, frozen)
            )
            start = await self.sequence.begin(step, weights)
            started = time.perf_counter()
            episode_fn = run.episode_fn
            if league is not None:
                league.begin_step(step, start.tasks, run.settings.group_size)
                episode_fn = league.episode_fn(episode_fn)
            episodes = await run_rollout(
                episode_fn,
                start.tasks,
                weights.tuner_factory(training=True),
                run.settings,
                run.judge,
                step,
                self.algorithm.seed,
                self.sequence.progress,
            )
            seconds = time.perf_counter() - started
            metrics = {**(league.end_step() if league is not None else {}), **start.snapshot_ages}
            self._future(self._finished, step).set_result(
                Rollout(episodes, [version] * len(episodes), seconds, metrics)
            )
        self.sequence.points.reach(self.total_steps)

    async def _release(self, version: int) -> None:
        """The live weights are now `version` steps old: freeze a copy when a later rollout samples them while they
        train on, and hand them to the rollouts waiting on them."""
        later = range(version + 1, version + self.algorithm.max_staleness + 1)  # past the end too: a checkpoint
        if any(self.version_of(step) == version for step in later):  # names them for a run resumed to go on
            await self._freeze(version)
        else:
            self._future(self._ready, version).set_result(None)

    async def _freeze(self, version: int) -> None:
        """Save and copy the live weights (they are `version` steps old) and hand them to the rollouts waiting on
        them."""
        clients = self.models.clients
        saved = {key: client.save_weights_for_sampler(f"version-{version:06d}") for key, client in clients.items()}
        samplers = {
            key: await client.save_weights_and_get_sampling_client_async(kind="snapshot")
            for key, client in clients.items()
        }
        self._offer(version, FrozenVersion({key: (await future).path for key, future in saved.items()}, samplers))

    def _offer(self, version: int, frozen: FrozenVersion) -> None:
        """Hand `frozen` to the rollouts that sample `version` (those waiting for it, and those to come)."""
        self.versions[version] = frozen
        self._future(self._ready, version).set_result(frozen)

    def _forget_before(self, version: int) -> bool:
        """Drop the versions older than `version` (no later rollout samples them) that the latest checkpoint does not
        name, and delete their saved weights unless a snapshot opponent or a league snapshot uses them (in play, in a
        resume point, or in the latest checkpoint); True when it deleted any."""
        deleted = False
        in_play = {snapshot.path for snapshot in self.models.snapshots.values()} | self._checkpointed_snapshots
        league = self.models.league
        in_play |= {snapshot.path for snapshot in league.snapshots} if league is not None else set()
        for point in self.sequence.points.reached.values():
            in_play |= {
                snapshot["path"] for snapshot in [*point.snapshots.values(), *point.league.get("snapshots", [])]
            }
        for old in [v for v in self.versions if v < version and v not in self._checkpointed]:
            frozen = self.versions.pop(old)
            self._ready.pop(old, None)
            for path in set(frozen.paths.values()) - in_play:
                if Path(path).is_dir():  # a local save; a service's tinker:// path stays with the service
                    shutil.rmtree(path, ignore_errors=True)
                    deleted = True
        return deleted

    @staticmethod
    def _future(futures: dict[int, asyncio.Future], key: int) -> asyncio.Future:
        if key not in futures:
            futures[key] = asyncio.get_running_loop().create_future()
        return futures[key]


class RolloutWeights(Protocol):
    """The weights a step's rollout, and the evaluation before it, sample."""

    version: int
    """Optimizer steps those weights have taken."""

    def tuner_factory(self, training: bool) -> Callable[[], TunerHandle]:
        """Tuners on these weights: for the rollout (`training`: its temperature floor applies) or an evaluation."""

    async def retake_snapshots(self, step: int) -> None:
        """Retake the snapshot opponents due at the start of `step`, and the league's snapshot, from these weights."""


@dataclass
class LiveWeights:
    """The weights being trained, as the on-policy loop samples them."""

    models: TrainingModels
    """The run's models."""
    version: int
    """Optimizer steps taken: the step about to run."""

    def tuner_factory(self, training: bool) -> Callable[[], TunerHandle]:
        return self.models.make_training_tuner if training else self.models.make_tuner

    async def retake_snapshots(self, step: int) -> None:
        self.models.refresh_snapshots(step)
        if self.models.league is not None:
            self.models.league.refresh(step)


@dataclass
class StepRecord:
    """What a run's steps have produced so far."""

    steps: int
    """Optimizer steps taken in total (resumed ones included)."""
    history: list[dict] = field(default_factory=list)
    """Metrics of every step this process trained."""


class StepSequence:
    """The phases of every training step, and the bookkeeping they share: logging, warnings, evaluations,
    checkpoints."""

    def __init__(
        self,
        run: ResolvedRun,
        run_dir: Path,
        start_step: int,
        logger: MetricsLogger,
        progress: TrainingProgress,
        stop: StopSignals,
        hooks: list[StepHook],
        previous_metrics: list[dict],
    ) -> None:
        """`previous_metrics`: the logged metrics of a resumed run's earlier steps (empty for a new run)."""
        self.run = run
        self.run_dir = run_dir
        self.models = run.models
        self.warm_started = run.config.warm_start is not None or any(
            model.adapter_path for model in run.config.trainable_models().values()
        )
        """A trainable model starts from a saved adapter or a warm start: its step-0 evaluation is labelled 'step 0',
        not 'untrained'."""
        self.algorithm = run.config.algorithm
        self.logger = logger
        self.progress = progress
        self.stop = stop
        self.hooks = hooks
        self.points = ResumePoints(run_dir, run.stream, self.models, start_step, run.config.checkpoints.keep)
        self.rollouts = RolloutWriter(run_dir) if run.config.logging.save_rollouts else None
        """Where each trained step's episodes are written (by `step.learn`); None when the config turns it off."""
        self.streak = FailureStreak(self.algorithm.stop_after_failed_steps)
        self.signal = TrainingSignal(
            trained_before=any(record.get("tokens/trained", 0.0) > 0 for record in previous_metrics)
        )
        self.entropy = (
            self.algorithm.entropy_target.steering(previous_metrics) if self.algorithm.entropy_target else None
        )
        """The entropy bonus's steered coefficient (`step.learn` moves it); None without `algorithm.entropy_target`."""
        response = self.algorithm.collapse_response
        self.collapse = response.response(self.algorithm.exploration, previous_metrics) if response else None
        """The exploration the collapse response sets (`step.learn` moves it); None without
        `algorithm.collapse_response`."""
        if self.collapse is not None:
            self.models.rollout_exploration = self.collapse.exploration
        self.meter = PrefillMeter(self.models)
        self.record = StepRecord(steps=start_step)
        eval_tasks = run.eval_tasks[: run.config.evaluation.max_tasks or None]
        self.held_out = HeldOut(run, eval_tasks, self.meter, logger, progress)
        self.best = BestAdapter.open(run, run_dir, self.meter, logger, progress)
        """The validations that choose the adapter kept as `best`; None without `validation:`."""

    async def begin(self, step: int, weights: RolloutWeights) -> StepStart:
        """Open `step`: an empty prefix cache, snapshots and league, the evaluation and validation when due, the reseed,
        its tasks, the hooks."""
        self.stop.check()
        await self.models.empty_prefix_caches()
        await weights.retake_snapshots(step)
        snapshot_ages = self.models.snapshot_ages(weights.version)
        if self.held_out.evaluates and self.run.config.evaluation.evaluates_before(step):
            label = "untrained" if step == 0 and not self.warm_started else f"step {step}"
            await self.stop.cancelling(self.held_out.evaluate(step, label, weights.tuner_factory(training=False)))
        await self.validate(step, weights.tuner_factory(training=False))
        self.models.reseed(self.algorithm.seed, step)
        start = StepStart(step, next(self.run.stream), weights.version, snapshot_ages)
        for hook in self.hooks:
            await call_hook(hook.before_rollout, start)
        return start

    async def validate(self, steps: int, make_tuner: Callable[[], TunerHandle]) -> None:
        """Validate the weights after `steps` steps (`make_tuner`'s) when they are a candidate not validated yet."""
        if self.best is not None and self.best.due(steps, self.run.stream.num_steps):
            await self.stop.cancelling(self.best.validate(steps, make_tuner))

    async def finish(self, step: int, metrics: dict[str, float], episodes: list[Episode]) -> bool:
        """Close a trained step: warnings, hooks, logging, the next resume point; True when the run must stop
        (every episode failing for `stop_after_failed_steps` steps)."""
        failing = self.streak.observe(episodes)
        untrained = self.signal.observe(episodes, metrics)
        warning = (
            failing
            or (None if self.algorithm.allow_nothing_trained else untrained)
            or self.signal.collapse_warning(metrics)
        )
        if warning:
            log.warning("step %d: %s", step + 1, warning)
        for hook in self.hooks:
            metrics.update(await call_hook(hook.after_training, StepEnd(step, dict(metrics), episodes)) or {})
        metrics.update(self.meter.take().metrics())
        self.record.history.append(metrics)
        logged = self.logger.log(step + 1, metrics)
        self.progress.update(step + 1, metrics)
        self.record.steps = step + 1
        self.points.advance(step + 1, logged)
        return self.streak.exhausted
