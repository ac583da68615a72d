"""Werewolf rules: seats and roles, night and day resolution, the winner -- no models, no prompts.

Kept apart from the workflow (`workflow.py`) so the rules can be tested with
scripted decisions. `GameState` is the table: seven `Player`s (2 werewolves,
3 villagers, a seer, a witch) dealt from the task seed, the witch's two
potions, and the seeded `rng` every fallback draws from (so the episodes of
one task group differ only by what the models say).

Players' replies reach the rules already parsed (`parse_target`,
`parse_witch`): a name of an allowed player, or None for a reply that names
none. The rules then fall back: a werewolf kill with no readable proposal
hits a random good player, an unreadable seer check looks at a random
unchecked player, an unreadable vote abstains, an unreadable witch passes.

Win: the good side wins when no werewolf is alive; the werewolves win when
they are at least as many as the living good players. The werewolves must
get there within the round limit: a village that survives it wins (so a
short game still has a winner, and each side's play decides it).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

ROLES = ("werewolf", "werewolf", "villager", "villager", "villager", "seer", "witch")
WEREWOLF = "werewolf"
GOOD_GUY = "good_guy"
Side = Literal["werewolf", "good_guy"]
_NAMED = re.compile(r"\bp(?:layer)?\s*#?\s*(\d+)\b", re.IGNORECASE)
_BARE_NUMBER = re.compile(r"\b(\d+)\b")
_PASS_WORDS = re.compile(r"\b(?:pass|nothing|no|none|nobody|skip)\b", re.IGNORECASE)


class GameBroken(RuntimeError):
    """The game reached a state its rules cannot continue from."""


@dataclass
class Player:
    """One seat at the table."""

    name: str
    """Player1 ... Player7: how everyone refers to this seat."""
    role: str
    """werewolf, villager, seer or witch; secret from the others."""
    alive: bool = True
    """False once killed, poisoned or voted out."""

    @property
    def side(self) -> Side:
        return WEREWOLF if self.role == WEREWOLF else GOOD_GUY


@dataclass
class GameState:
    """The whole table: who is who, who lives, which potions are left."""

    players: list[Player]
    """Seats in speaking order."""
    rng: random.Random
    """Seeded source of every fallback choice."""
    round: int = 0
    """Rounds started (a round is a night then a day)."""
    heal_available: bool = True
    """The witch has not used her healing potion yet."""
    poison_available: bool = True
    """The witch has not used her poison yet."""
    checked: set[str] = field(default_factory=set)
    """Players the seer has already checked."""

    @classmethod
    def deal(cls, seed: int) -> GameState:
        """Seven players with the roles shuffled by `seed` (the same seed deals the same table)."""
        rng = random.Random(seed)
        roles = list(ROLES)
        rng.shuffle(roles)
        return cls([Player(f"Player{i + 1}", role) for i, role in enumerate(roles)], rng)

    def player(self, name: str) -> Player:
        for player in self.players:
            if player.name == name:
                return player
        raise GameBroken(f"no player named {name!r}; players are {[p.name for p in self.players]}")

    def living(self, role: str | None = None, side: Side | None = None) -> list[Player]:
        return [
            p for p in self.players if p.alive and (role is None or p.role == role) and (side is None or p.side == side)
        ]

    def winner(self) -> Side | None:
        wolves, good = len(self.living(side=WEREWOLF)), len(self.living(side=GOOD_GUY))
        if wolves == 0:
            return GOOD_GUY
        if wolves >= good:
            return WEREWOLF
        return None


def parse_target(text: str, allowed: list[str]) -> str | None:
    """The first allowed player the reply names ("Player3", "player 3", "P3"; else a bare 3); None if it names none."""
    for pattern in (_NAMED, _BARE_NUMBER):
        for match in pattern.finditer(text):
            if f"Player{match.group(1)}" in allowed:
                return f"Player{match.group(1)}"
    return None


def parse_witch(
    text: str, victim: str | None, poison_targets: list[str], state: GameState
) -> tuple[Literal["heal", "poison", "pass"], str | None, bool]:
    """(action, poison target, whether the reply was readable); an unusable request reads as pass."""
    lowered = text.lower()
    if "poison" in lowered and state.poison_available:
        target = parse_target(text, poison_targets)
        if target is not None:
            return "poison", target, True
    if any(word in lowered for word in ("save", "heal")) and state.heal_available and victim is not None:
        return "heal", None, True
    return "pass", None, bool(_PASS_WORDS.search(text))


def resolve_kill(state: GameState, proposals: list[str | None]) -> str:
    """The werewolves' victim: the most proposed target (ties by lot); a random good player if no proposal was
    readable."""
    targets = [p.name for p in state.living(side=GOOD_GUY)]
    if not targets:
        raise GameBroken("the werewolves have nobody left to kill")
    counts = Counter(p for p in proposals if p in targets)
    if not counts:
        return state.rng.choice(targets)
    top = max(counts.values())
    return state.rng.choice(sorted(name for name, count in counts.items() if count == top))


def seer_fallback(state: GameState, seer: str) -> str:
    """A random living player the seer has not checked (any living other player once all are checked)."""
    others = [p.name for p in state.living() if p.name != seer]
    unchecked = [name for name in others if name not in state.checked]
    return state.rng.choice(unchecked or others)


def resolve_night(
    state: GameState, kill: str, action: Literal["heal", "poison", "pass"], poisoned: str | None
) -> list[str]:
    """Apply the night: the kill (unless healed) and the poison; returns who died, in seat order."""
    dying = set()
    if action == "heal":
        state.heal_available = False
    else:
        dying.add(kill)
    if action == "poison":
        if poisoned is None:
            raise GameBroken("the witch poisons without a target")
        state.poison_available = False
        dying.add(poisoned)
    for name in dying:
        state.player(name).alive = False
    return [p.name for p in state.players if p.name in dying]


def resolve_vote(state: GameState, votes: dict[str, str | None]) -> str | None:
    """The player with the most votes is eliminated; a tie, or no vote at all, eliminates nobody."""
    counts = Counter(target for target in votes.values() if target is not None)
    if not counts:
        return None
    ranked = counts.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    eliminated = ranked[0][0]
    state.player(eliminated).alive = False
    return eliminated
