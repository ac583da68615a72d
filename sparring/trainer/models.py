"""The models of one training run: trainable policies and frozen auxiliary models.

`TrainingModels` holds one LoRA training client per trainable model (all on
one shared engine when they share a base model, built by
`models_from_config.build_models`), the chat models that workflows call
(`PolicyChatModel` on each live adapter, frozen local or OpenAI-compatible
models for the auxiliary ones), and applies one update: `forward_backward`
for every model first, then every `optim_step`, so the engine runs them back
to back.

A `Snapshot` is an auxiliary model that is a frozen copy of a trainable
adapter (`TunerModelConfig.snapshot_of`): it lives on the same engine as its
source, so only the LoRA matrices are copied, never the base weights.
`refresh_snapshots` retakes it every `snapshot_interval_steps` during
training and saves it as a PEFT directory, which the checkpoint refers to,
so a resumed run plays against exactly the same snapshot. When rollouts run
ahead of training (`algorithm.max_staleness`, see `pipeline.py`),
`frozen_tuner` hands workflows policies that sample a frozen older copy of
the weights (recorded and trained under their own model keys), and
snapshots are retaken from that copy (`install_snapshot`) rather than from
the live weights.

Every model runs on a backend chosen by `TunerModelConfig.backend`: 'local'
(an engine in this process) or 'tinker' (a Tinker-protocol service). Both
hand out clients with the same interface, so nothing here knows which one it
has; a snapshot always lives where its source model does.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ..clients import RemoteTrainingClient, SamplingClient, TrainingClient
from ..engine import Engine
from ..integrations import TunerHandle
from ..rollout import ChatModel, FrozenChatModel, PolicyChatModel
from ..types import AdamParams, Datum, ForwardBackwardOutput
from .config import TunerModelConfig
from .league import League


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
