"""Asynchronous off-policy training: later steps' rollouts run while the current step trains.

With `algorithm.max_staleness: N` > 0 a run is a two-stage pipeline in one
event loop. The producer plays the rollouts one step after another, as the
on-policy loop would, but each on a frozen copy of older weights: the rollout
of step k samples `version_of(k) = max(k - N, e)` of every trainable model
(version j = the weights after j optimizer steps; e = the latest evaluation
step at or before k), so it starts as soon as that version exists, while
steps up to k - 1 still train. The trainer takes the rollouts in order,
trains on each (`step.learn`), and then freezes the new version
(`FrozenVersion`: saved as sampler weights, and copied in memory to sample
from). The loss's importance ratio uses the sampler logprobs recorded with
every token, so the PPO / CISPO clip accounts for the lag; `staleness/mean`
and `staleness/max` (optimizer steps between the weights that sampled a
trained token and the weights that train on it) are logged every step.

Why a fixed lag rather than "the newest weights there are": which weights
sample each rollout is then a function of the config alone, so a run is
reproducible and a resumed run is the same run. For the same reason
rollouts never overlap one another, only training: the sampler's seed
stream, the task stream and the global RNGs advance in the same order as in
an uninterrupted run. Evaluations are barriers: the evaluation of step s
waits for the weights of step s and runs with no rollout in flight, and the
rollouts from step s on sample those weights or newer.

Both stages run the phases every step shares through the run's
`StepSequence` (`step_sequence.py`): the producer begins each step (its
snapshots from the frozen weights, `FrozenWeights`, its evaluation, tasks and
hooks), the trainer finishes each in order (log, checkpoint).

Resume: when the producer reaches a step (before that step's snapshots,
evaluation and tasks) the sequence's `ResumePoints` record one; the checkpoint after step
s saves the one of step s, with the saved paths of the older versions that
rollouts s, s + 1, ... sample, and the resumed run reloads them and redoes
the rollouts that were in flight. Saved versions that no rollout, snapshot
or latest checkpoint needs any more are deleted (local ones; a service keeps
its own).

On the local engine the overlap is interleaving, not parallel compute: one
worker runs the model, so sampling and training alternate on it, and the
pipeline hides everything else -- workflow code, batching windows, advantage
and datum assembly, logging, checkpoints -- behind the model's work. A
Tinker-protocol service that samples and trains on separate workers
overlaps the two themselves.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..integrations import TunerHandle
from ..rollout import Episode
from .checkpoints import prune_unresumable
from .models import TrainingModels
from .step import learn, run_rollout
from .step_sequence import StepSequence


@dataclass
class FrozenVersion:
    """Every trainable model's weights after some number of optimizer steps, kept for the rollouts that sample them."""

    paths: dict[str, str]
    """Per model key, the saved sampler weights (what checkpoints and snapshot opponents refer to)."""
    samplers: dict
    """Per model key, a sampling client on a frozen copy of those weights."""


@dataclass
class FrozenWeights:
    """A frozen version as a rollout samples it (the pipeline's `RolloutWeights`)."""

    models: TrainingModels
    """The run's models (snapshot opponents are installed there)."""
    version: int
    """Optimizer steps of the frozen weights."""
    frozen: FrozenVersion
    """The weights."""

    def tuner_factory(self, training: bool) -> Callable[[], TunerHandle]:
        return self.models.frozen_tuner(self.frozen.samplers, training=training)

    async def retake_snapshots(self, step: int) -> None:
        """Retake the snapshot opponents due at `step` from the frozen weights, as the on-policy loop does from the
        live ones."""
        for name in self.models.due_snapshots(step, self.version):
            source = self.models.snapshots[name].source
            path = self.frozen.paths[source]
            sampler = await asyncio.to_thread(self.models.clients[source].create_sampling_client, path)
            self.models.install_snapshot(name, sampler, path, self.version)


@dataclass
class Rollout:
    """One step's finished rollout, as the producer hands it to the trainer."""

    episodes: list[Episode]
    """The step's episodes, grouped by task."""
    version: int
    """Optimizer steps of the weights that sampled every trainable call of these episodes."""
    seconds: float
    """How long the episodes took to play."""
    snapshot_ages: dict[str, float] = field(default_factory=dict)
    """`snapshot/<name>/age_steps` of the snapshot opponents they played against."""


class RolloutPipeline:
    """Rollouts on frozen older weights running ahead of training, by at most `max_staleness` optimizer steps."""

    def __init__(self, sequence: StepSequence, saved_versions: dict[int, dict[str, str]]):
        """`sequence`: the run's step phases (the pipeline begins steps in its producer and finishes them in order);
        `saved_versions`: the older weights the resumed checkpoint names."""
        self.sequence = sequence
        sequence.points.frozen = self
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

    def version_of(self, step: int) -> int:
        """The weights version that samples the rollout of `step`: `max_staleness` behind, never before an
        evaluation step."""
        interval = self.sequence.run.config.evaluation.interval_steps if self.sequence.held_out.evaluates else 0
        last_evaluation = step - step % interval if interval else 0
        return max(step - self.algorithm.max_staleness, last_evaluation, self.oldest_version)

    def pending_versions(self, step: int) -> dict[int, dict[str, str]]:
        """The older weights that rollouts from `step` on sample, as the checkpoint after `step` steps names them."""
        pending = range(self.version_of(step), step)
        # A version not loaded yet (the run stopped while starting) is still where the resumed checkpoint named it.
        saved = {
            version: self.versions[version].paths if version in self.versions else self.saved_versions[version]
            for version in pending
        }
        self._checkpointed = set(pending)
        self._checkpointed_snapshots = {
            snapshot["path"] for snapshot in self.sequence.points.reached[step].snapshots.values()
        }
        return saved

    async def run(self) -> None:
        """Train every remaining step with the rollouts running ahead of training."""
        for version, paths in self.saved_versions.items():
            samplers = {
                key: await asyncio.to_thread(self.models.clients[key].create_sampling_client, path)
                for key, path in paths.items()
            }
            self._offer(version, FrozenVersion(paths, samplers))
        await self._freeze(self.start_step)
        producer = asyncio.create_task(self._produce())
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
                staleness = float(step - rollout.version)  # one version samples every token of a step
                metrics.update(rollout.snapshot_ages)
                metrics.update(
                    {
                        "staleness/mean": staleness,
                        "staleness/max": staleness,
                        "time/rollout": rollout.seconds,
                        "time/wait_rollout": waited,
                    }
                )
                metrics["time/step"] = (
                    time.perf_counter() - last_step_ended
                )  # the step's share of the pipeline's wall time
                last_step_ended = time.perf_counter()
                if await self.sequence.finish(step, metrics, rollout.episodes):
                    return
                self.sequence.stop.check()
                if step + 1 < self.total_steps:
                    await self._freeze(step + 1)
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
        for step in range(self.start_step, self.total_steps):
            self.sequence.points.reach(
                step
            )  # before waiting for the weights: the trainer may checkpoint this step meanwhile
            version = self.version_of(step)
            weights = FrozenWeights(self.models, version, await self._future(self._ready, version))
            start = await self.sequence.begin(step, weights)
            started = time.perf_counter()
            run = self.resolved
            episodes = await run_rollout(
                run.episode_fn,
                start.tasks,
                weights.tuner_factory(training=True),
                run.settings,
                run.judge,
                step,
                self.algorithm.seed,
                self.sequence.progress,
            )
            self._future(self._finished, step).set_result(
                Rollout(episodes, version, time.perf_counter() - started, start.snapshot_ages)
            )
        self.sequence.points.reach(self.total_steps)

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
        name, and delete their saved weights unless a snapshot opponent uses them (in play, in a resume point, or in
        the latest checkpoint); True when it deleted any."""
        deleted = False
        in_play = {snapshot.path for snapshot in self.models.snapshots.values()} | self._checkpointed_snapshots
        in_play |= {
            snapshot["path"] for point in self.sequence.points.reached.values() for snapshot in point.snapshots.values()
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
