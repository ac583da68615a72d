"""The `league:` section of a job: which opponents a two- or n-player workflow trains against, and how they are drawn.

A league's pool holds three kinds of opponent: frozen snapshots of the policy (one taken every
`snapshot_every_steps`, at most `max_snapshots`, evicted by `eviction`), scripted opponents (`scripted`: a
`policy(messages, rng) -> reply` by import path, the same contract as `baselines:`) and frozen auxiliary models
(`models`: names in `auxiliary_models`). Every training episode draws one opponent by `sampling` (see
`algorithms.opponent_sampling`); the workflow gets it by name (see `trainer.league`). How the pool is run is
`league.py`; this file is only what the YAML says and its checks.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .schema import ConfigRecord

MAX_SNAPSHOTS = 64
SNAPSHOT_PREFIX = "snapshot-"
"""Snapshot opponents are named snapshot-<step>, the optimizer steps their weights had taken."""


class LeagueConfig(ConfigRecord):
    """An opponent pool for self-play that keeps learning: snapshots, scripted and frozen opponents, drawn per
    episode."""

    learner: str | None = None
    """The trainable model whose snapshots join the pool and whose games are counted; None: the only trainable model."""
    snapshot_every_steps: int = Field(default=5, ge=0, le=1_000_000)
    """Add a snapshot of the learner at the start of every N-th step (step 0 included); 0 adds none."""
    max_snapshots: int = Field(default=4, ge=1, le=MAX_SNAPSHOTS)
    """Most snapshots in the pool; past it one is evicted by `eviction` (each is a LoRA copy on the engine)."""
    eviction: Literal["oldest", "weakest"] = "oldest"
    """Which snapshot leaves a full pool: 'oldest' (first in, first out) or 'weakest' (the one the policy beats most,
    lowest pfsp weight; ties to the oldest). The newest snapshot never leaves."""
    scripted: dict[str, str] = Field(default_factory=dict)
    """Scripted opponents: name -> import path ('pkg.module:function') of `policy(messages, rng) -> reply`."""
    models: list[str] = Field(default_factory=list)
    """Frozen opponents: names of `auxiliary_models` (the base model, an endpoint, a saved adapter)."""
    sampling: Literal["pfsp", "uniform", "latest"] = "pfsp"
    """How an episode's opponent is drawn: 'pfsp' (weight = failure_rate ** pfsp_power, failure = loss or draw),
    'uniform', or 'latest' (the newest snapshot only)."""
    pfsp_power: float = Field(default=2.0, ge=0.0, le=16.0)
    """The exponent of pfsp's weighting: 0 is uniform, larger values focus on the opponents the policy fails against."""
    record_decay: float = Field(default=0.8, gt=0.0, le=1.0)
    """Every step each opponent's win/draw/loss counts are multiplied by this, so its record follows the changing
    policy; 1 keeps the whole history."""
    draw_per: Literal["episode", "group"] = "episode"
    """'episode': every episode of a GRPO group draws its own opponent, so even a deterministic policy meets different
    outcomes within a group; 'group': one opponent per task, the group's episodes differ only by sampling."""
    baseline_per_opponent: bool = False
    """Compare a game only with the games of its group against the same opponent (the episode's `baseline_group`; all
    snapshots count as one opponent, `snapshot-*`), so with `draw_per: episode` a game against a strong opponent is
    measured against others against it, not against the group's wins over weak ones. A game alone with its opponent
    in its group gets no advantage."""
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    """Seed of the draws (and of the scripted opponents' randomness); with the step it makes a run's draws
    reproducible."""

    @model_validator(mode="after")
    def _pool(self) -> LeagueConfig:
        if not self.snapshot_every_steps and not self.scripted and not self.models:
            raise ValueError("league: the pool is empty; set snapshot_every_steps, scripted or models")
        if self.sampling == "latest" and not self.snapshot_every_steps:
            raise ValueError("league.sampling: 'latest' draws the newest snapshot; set snapshot_every_steps above 0")
        names = [*self.scripted, *self.models]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"league: opponent names {repeated} appear twice; each opponent needs one name")
        for name in names:
            if name.startswith(SNAPSHOT_PREFIX):
                raise ValueError(
                    f"league: opponent name {name!r} starts with {SNAPSHOT_PREFIX!r}, which names the snapshots"
                )
        return self  # the scripted opponents' import paths are checked when the run is built (`config_names.py`)
