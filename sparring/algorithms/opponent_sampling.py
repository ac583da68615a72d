"""Choosing opponents for a league: each opponent's record against the policy, how likely it is drawn, which
snapshot goes.

A league keeps an `OpponentRecord` per opponent: the games the policy won, drew and lost against it, decayed
every step (`decay`), so a record follows the policy as it changes rather than its whole history.

`draw_probabilities` turns the records into the probability each opponent is drawn for an episode:

- `pfsp` (prioritized fictitious self-play): weight = failure_rate ** power, where failure_rate =
  (losses + draws + 1) / (games + 2) is the share of games the policy did not win, smoothed towards 1/2 so an
  opponent never played gets weight 0.5 ** power and one always beaten keeps a little weight (it is not forgotten);
- `uniform`: every opponent alike;
- `latest`: only the newest snapshot.

`eviction_choice` picks the snapshot to drop when the pool is full: `oldest` (first in, first out) or `weakest`
(the lowest pfsp weight: the one the policy beats most; ties go to the oldest). The newest snapshot is never evicted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from ..rollout.outcomes import GAME_OUTCOMES as OUTCOMES

_COUNTS = {"win": "wins", "draw": "draws", "loss": "losses"}
SamplingRule = Literal["pfsp", "uniform", "latest"]
EvictionRule = Literal["oldest", "weakest"]


@dataclass
class OpponentRecord:
    """How the policy has done against one opponent (decayed counts, so recent games weigh most)."""

    wins: float = 0.0
    """Games the policy won."""
    draws: float = 0.0
    """Games drawn."""
    losses: float = 0.0
    """Games the policy lost."""

    @property
    def games(self) -> float:
        return self.wins + self.draws + self.losses

    @property
    def failure_rate(self) -> float:
        """Share of games the policy did not win, smoothed: (losses + draws + 1) / (games + 2)."""
        return (self.losses + self.draws + 1.0) / (self.games + 2.0)

    def add(self, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"a league game's outcome is one of {OUTCOMES}, got {outcome!r}")
        field_name = _COUNTS[outcome]
        setattr(self, field_name, getattr(self, field_name) + 1.0)

    def decay(self, factor: float) -> None:
        self.wins, self.draws, self.losses = self.wins * factor, self.draws * factor, self.losses * factor


def pfsp_weight(failure_rate: float, power: float) -> float:
    """Prioritized fictitious self-play's weight of an opponent the policy fails against `failure_rate` of the time."""
    return failure_rate**power


def draw_probabilities(
    records: dict[str, OpponentRecord], rule: SamplingRule, power: float = 2.0, newest: str | None = None
) -> dict[str, float]:
    """The probability each opponent of `records` (the pool) is drawn for an episode; `newest` is the latest
    snapshot."""
    if not records:
        raise ValueError("the league's pool is empty: no opponent to draw")
    if rule == "latest":
        if newest not in records:
            raise ValueError(f"sampling 'latest' draws the newest snapshot, and the pool has none ({sorted(records)})")
        return {name: float(name == newest) for name in records}
    if rule == "uniform":
        weights = {name: 1.0 for name in records}
    elif rule == "pfsp":
        weights = {name: pfsp_weight(record.failure_rate, power) for name, record in records.items()}
    else:
        raise ValueError(f"unknown sampling rule {rule!r}; use 'pfsp', 'uniform' or 'latest'")
    total = sum(weights.values())
    return {name: weight / total for name, weight in weights.items()}


def draw_opponents(probabilities: dict[str, float], count: int, rng: random.Random) -> list[str]:
    """`count` opponents drawn independently with `probabilities`."""
    names = list(probabilities)
    return rng.choices(names, weights=[probabilities[name] for name in names], k=count)


def eviction_choice(
    snapshots: list[str], records: dict[str, OpponentRecord], rule: EvictionRule, power: float = 2.0
) -> str:
    """The snapshot to drop from `snapshots` (oldest first; the last, newest one is never chosen)."""
    if len(snapshots) < 2:
        raise ValueError("eviction needs at least two snapshots: the newest one always stays")
    candidates = snapshots[:-1]
    if rule == "oldest":
        return candidates[0]
    if rule == "weakest":
        weights = [pfsp_weight(records.get(name, OpponentRecord()).failure_rate, power) for name in candidates]
        return candidates[weights.index(min(weights))]  # index() finds the first: ties go to the oldest
    raise ValueError(f"unknown eviction rule {rule!r}; use 'oldest' or 'weakest'")
