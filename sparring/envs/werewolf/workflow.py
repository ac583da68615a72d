"""Werewolf: seven LLM players, one side trained, the other played by a frozen auxiliary model.

AgentScope's multi-agent tuning example, on sparring's API with the same
signature: `werewolf(task, model, auxiliary_models) -> WorkflowOutput`. The
task seed deals the roles (2 werewolves, 3 villagers, a seer, a witch; rules
in `rules.py`). `workflow_args.trainable_target` picks the side that
learns -- `werewolf` or `good_guy` -- so one YAML line switches it: trained
players are `model.as_agent(player, role)` (own timeline and reward each,
advantages per role), the others `auxiliary_models["participant"]`.

A `Seat` is a player's model plus its own conversation: everything it
witnessed since it last spoke arrives in one user message with the next
request, and its replies are appended as sampled, so a player's calls merge
into one training sequence per round. Each new round starts a fresh
conversation from a one-line record of the rounds before (who died, the
votes, the seer's findings), which keeps prompts short; `full_history: true`
(the shipped config's setting) keeps the whole game in one conversation
instead: with the engine's prefix cache only each call's new messages are
prefilled, so it costs what the short prompts cost (benchmarks/README.md). A round is a night (werewolves pick a kill,
the seer checks a player, the witch may save the victim or poison someone,
each potion once) and a day (every living player says one short sentence,
then all vote; most votes is eliminated, a tie eliminates nobody). The `Game`
runs the rounds; the rules state lives in `rules.GameState`. Two werewolves
who vote the same good player decide a day against a scattered vote, which
`coordinated_werewolves` (baselines.py) shows is worth most of the game;
`vote_credit` (0, off) is per-turn credit for it: a turn reward of that size
for a trained werewolf's vote that names the good player its living mate
voted, metric `wolf_votes_matched` (the share of days both did);
`elimination_credit` (0, off) pays a trained werewolf's vote that names the
good player the vote puts out, metric `wolf_votes_eliminating` (the share of
werewolf votes that did). `train_speech: false` has the participant model
make the trained side's speeches (a `Seat`'s `speaker`), so only its
decisions are trainable calls.

Decisions are constrained actions (`choices=`): a kill names one living good
player, a check one other living player, a vote one other living player or
`skip` (abstain), the witch one of `PASS`, `SAVE` (while she has the potion)
and `POISON <name>` (while she has the poison). A local model can only reply
with one of them, so no decision is invalid; speeches stay free text. A
reply outside the choices (an OpenAI-compatible endpoint that ignores the
constraint, a scripted player) is read leniently (a player's name anywhere in
it) and an unreadable one falls back by rule; `invalid_action_rate` counts
those. Reward per trained player: 1 if its side
won, 0 otherwise (the good side wins when it survives `max_rounds`), and
`broken_reward` (-0.1) if the game could not continue. `workflow_args` (`WerewolfArgs`):
`trainable_target`, `max_rounds` (5), `speech_tokens` (24),
`full_history` (false), `vote_credit` (0), `elimination_credit` (0), `train_speech` (true),
`participant` (the auxiliary model's name), `broken_reward`.

    sparring train werewolf     # this folder's config.yaml: trainable_target werewolf; edit that one line for good_guy
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from sparring import ChatModel, WorkflowArgs, WorkflowOutput, takes_args

from .rules import (
    GOOD_GUY,
    ROLES,
    WEREWOLF,
    GameState,
    parse_target,
    parse_witch,
    resolve_kill,
    resolve_night,
    resolve_vote,
    seer_fallback,
)

log = logging.getLogger(__name__)

SYSTEM = (  # the rules come first: every player's prompt starts the same, so a batch prefills them once
    "A game of werewolf with Player1 to Player7: 2 werewolves, 3 villagers, a seer and a witch. "
    "The good players win by voting out both werewolves; the werewolves win if they are as many as the "
    "good players within {max_rounds} rounds. "
    "Answer in one short sentence. You are {name}, a {role}. {duty}"
)
DUTIES = {
    "werewolf": "Your fellow werewolf is {mate}. Each night you choose a good player to kill. By day, hide your role.",
    "villager": "Find the werewolves and vote them out.",
    "seer": "Each night you learn whether one player is a werewolf.",
    "witch": "You have one potion that saves the night's victim and one poison that kills a player.",
}
SPEECH_CHARS = 160
DECISION_TOKENS = 32
"""Room for the longest choice and the end of the turn (a constrained reply ends itself once complete)."""
SKIP = "skip"
"""The vote that abstains."""


@dataclass
class Seat:
    """A player at the table: the model it speaks with and its own conversation."""

    name: str
    """Player1 ... Player7."""
    role: str
    """Its secret role."""
    model: ChatModel
    """The policy (trained side) or the frozen participant model, under this player's name."""
    trained: bool
    """Whether this player's side is the trainable target."""
    history: list[dict] = field(default_factory=list)
    """Its conversation: system prompt, then requests and its replies as sampled."""
    pending: list[str] = field(default_factory=list)
    """What it has witnessed since it last spoke; sent with its next request."""
    notes: list[str] = field(default_factory=list)
    """Private facts it keeps from round to round (the seer's findings)."""
    actions: int = 0
    """Decisions asked of it (kill, check, potion, vote)."""
    invalid: int = 0
    """Decisions whose reply named no allowed choice and fell back by rule."""
    speaker: ChatModel | None = None
    """The frozen model that makes its day speeches when they are not trained (`train_speech: false`); None: `model`."""
    turn_rewards: list[float] = field(default_factory=list)
    """One per call `model` made, 0 unless a decision earned per-turn credit (`vote_credit`, `elimination_credit`)."""

    async def ask(
        self, request: str, max_tokens: int, speaker: ChatModel | None = None, **constraint: list[str]
    ) -> str:
        """Send what it witnessed and `request` to `speaker` (else its model); the reply (constrained by `choices=`
        when given) joins its conversation."""
        self.history.append({"role": "user", "content": "\n".join([*self.pending, request])})
        self.pending.clear()
        reply = await (speaker or self.model)(self.history, max_tokens=max_tokens, **constraint)
        self.history.append(reply.message)
        if speaker is None:
            self.turn_rewards.append(0.0)
        return reply.content

    async def decide(self, request: str, choices: list[str]) -> str:
        """The reply to a decision, constrained to `choices` (a local model replies with exactly one of them)."""
        self.actions += 1
        return (await self.ask(request, DECISION_TOKENS, choices=choices)).strip()


@dataclass
class Game:
    """One game in progress: the rules' state, the seats, and the reply budgets."""

    state: GameState
    """Who is who and who lives."""
    seats: dict[str, Seat]
    """Seat per player name."""
    speech_tokens: int
    """Most tokens of one day speech."""
    full_history: bool = False
    """Keep each player's whole game in one conversation; otherwise each round starts a new one from a summary."""
    vote_credit: float = 0.0
    """Turn reward for a trained werewolf's vote that matches its living mate's vote for a good player."""
    elimination_credit: float = 0.0
    """Turn reward for a trained werewolf's vote that names the good player the day's vote eliminates."""
    wolf_votes: int = 0
    """Day votes cast by werewolves."""
    wolf_votes_eliminating: int = 0
    """Of those, votes naming the good player the vote eliminated."""
    wolf_days: int = 0
    """Days on which two werewolves voted."""
    wolf_days_matched: int = 0
    """Of those, days on which both voted the same good player."""
    record: list[str] = field(default_factory=list)
    """Public facts of the rounds so far (deaths, eliminations): the summary a new round starts from."""

    def start_round(self) -> None:
        """Next round; without `full_history` every player starts it afresh from the record, so prompts stay short."""
        self.state.round += 1
        if self.full_history or self.state.round == 1:
            return
        for seat in self.living_seats():
            seat.history = seat.history[:1]
            seat.pending = [f"So far: {'; '.join([*self.record, *seat.notes])}."]

    def tell(self, text: str, to: list[Seat] | None = None) -> None:
        for seat in self.seats.values() if to is None else to:
            seat.pending.append(text)

    def living_seats(self, role: str | None = None) -> list[Seat]:
        return [self.seats[p.name] for p in self.state.living(role)]

    async def night(self) -> None:
        state, number = self.state, self.state.round
        wolves, good = self.living_seats(WEREWOLF), [p.name for p in state.living(side=GOOD_GUY)]
        seers = self.living_seats("seer")
        kill_request = f"Night {number}. Who do you kill? Reply with one name: {', '.join(good)}."
        proposals, checks = await asyncio.gather(
            asyncio.gather(*(wolf.decide(kill_request, good) for wolf in wolves)),
            asyncio.gather(*(self._seer_check(seer) for seer in seers)),
        )
        parsed = [parse_target(text, good) for text in proposals]
        for wolf, choice in zip(wolves, parsed, strict=True):
            wolf.invalid += choice is None
        victim = resolve_kill(state, parsed)
        self.tell(f"The werewolves chose to kill {victim}.", to=wolves)
        for seer, checked in zip(seers, checks, strict=True):
            role = state.player(checked).role
            finding = f"{checked} is {'a werewolf' if role == WEREWOLF else 'not a werewolf'}"
            self.tell(f"{finding}.", to=[seer])
            seer.notes.append(finding)
        action, poisoned = await self._witch(victim)
        dead = resolve_night(state, victim, action, poisoned)
        died = " and ".join(dead) + " died" if dead else "nobody died"
        self.record.append(f"night {number}: {died}")
        self.tell(f"Night {number} is over: {died}.")

    async def _seer_check(self, seer: Seat) -> str:
        others = [p.name for p in self.state.living() if p.name != seer.name]
        request = f"Night {self.state.round}. Whose role do you check? Reply with one name: {', '.join(others)}."
        checked = parse_target(await seer.decide(request, others), others)
        if checked is None:
            seer.invalid += 1
            checked = seer_fallback(self.state, seer.name)
        self.state.checked.add(checked)
        return checked

    async def _witch(self, victim: str) -> tuple[str, str | None]:
        state = self.state
        witches = self.living_seats("witch")
        if not witches or not (state.heal_available or state.poison_available):
            return "pass", None
        witch = witches[0]
        targets = [p.name for p in state.living() if p.name != witch.name]
        options, choices = [f"{victim}{' (you)' if victim == witch.name else ''} was attacked."], ["PASS"]
        if state.heal_available:
            options.append("Reply SAVE to save them.")
            choices.append("SAVE")
        if state.poison_available:
            options.append(f"Reply POISON and one name to kill: {', '.join(targets)}.")
            choices += [f"POISON {name}" for name in targets]
        options.append("Or reply PASS.")
        reply = await witch.decide(f"Night {state.round}. " + " ".join(options), choices)
        action, poisoned, readable = parse_witch(reply, victim, targets, state)
        witch.invalid += not readable
        return action, poisoned

    async def day(self) -> None:
        state, number = self.state, self.state.round
        for seat in self.living_seats():
            speech = await seat.ask(
                f"Day {number}. Speak briefly: who do you suspect?", self.speech_tokens, seat.speaker
            )
            said = " ".join(speech.split())[:SPEECH_CHARS] or "(silence)"
            self.tell(f"{seat.name}: {said}", to=[s for s in self.living_seats() if s is not seat])
        voters = self.living_seats()
        ballots = await asyncio.gather(*(self._vote(seat) for seat in voters))
        votes = {seat.name: ballot for seat, ballot in zip(voters, ballots, strict=True)}
        self._credit_wolf_votes(votes)
        out = resolve_vote(state, votes)
        self._credit_eliminations(votes, out)
        cast = ", ".join(f"{voter}->{target}" for voter, target in votes.items() if target) or "none"
        result = f"Votes: {cast}. " + (f"{out} was eliminated." if out else "Nobody was eliminated.")
        self.record.append(f"day {number}: {result.rstrip('.')}")
        self.tell(result)

    def _credit_wolf_votes(self, votes: dict[str, str | None]) -> None:
        """Count the day's werewolf votes, and credit the matched ones (each vote is its seat's latest call)."""
        wolves = self.living_seats(WEREWOLF)
        if len(wolves) != 2:
            return
        self.wolf_days += 1
        first, second = (votes[wolf.name] for wolf in wolves)
        if first is None or first != second or self.state.player(first).side != GOOD_GUY:
            return
        self.wolf_days_matched += 1
        for wolf in wolves:
            if wolf.trained:
                wolf.turn_rewards[-1] += self.vote_credit

    def _credit_eliminations(self, votes: dict[str, str | None], out: str | None) -> None:
        """Count the werewolves' votes, and credit those that named the good player the vote eliminated."""
        wolves = [self.seats[voter] for voter in votes if self.seats[voter].role == WEREWOLF]
        self.wolf_votes += len(wolves)
        if out is None or self.state.player(out).side != GOOD_GUY:
            return
        for wolf in wolves:
            if votes[wolf.name] == out:
                self.wolf_votes_eliminating += 1
                if wolf.trained:
                    wolf.turn_rewards[-1] += self.elimination_credit

    async def _vote(self, seat: Seat) -> str | None:
        others = [p.name for p in self.state.living() if p.name != seat.name]
        reply = await seat.decide(
            f"Vote out a player. Reply with one name: {', '.join(others)}; or {SKIP} to abstain.", [*others, SKIP]
        )
        if reply == SKIP:
            return None
        ballot = parse_target(reply, others)
        seat.invalid += ballot is None  # an unreadable vote abstains
        return ballot

    async def play(self, max_rounds: int) -> str:
        """Rounds until a side wins; the good side when it survives `max_rounds`."""
        while self.state.round < max_rounds:
            self.start_round()
            await self.night()
            if winner := self.state.winner():
                return winner
            await self.day()
            if winner := self.state.winner():
                return winner
        return GOOD_GUY


def seat_players(
    state: GameState,
    trainable_target: str,
    model: ChatModel,
    participant: ChatModel,
    max_rounds: int,
    train_speech: bool = True,
) -> dict[str, Seat]:
    """A Seat per player: the trained side on the policy (its speeches on the participant model unless
    `train_speech`), the rest on the participant model."""
    seats = {}
    for player in state.players:
        trained = player.side == trainable_target
        chat = (model if trained else participant).as_agent(player.name, player.role)
        speaker = participant.as_agent(player.name, player.role) if trained and not train_speech else None
        mate = next((p.name for p in state.players if p.role == WEREWOLF and p is not player), "")
        system = SYSTEM.format(
            name=player.name, role=player.role, duty=DUTIES[player.role].format(mate=mate), max_rounds=max_rounds
        )
        seats[player.name] = Seat(
            player.name, player.role, chat, trained, speaker=speaker, history=[{"role": "system", "content": system}]
        )
    return seats


def game_metrics(winner: str | None, game: Game, trainable_target: str, max_rounds: int) -> dict[str, float]:
    seats = list(game.seats.values())
    trained = [s for s in seats if s.trained]
    metrics = {
        "werewolf_win": float(winner == WEREWOLF),
        "good_guy_win": float(winner == GOOD_GUY),
        "survived_round_limit": float(
            winner == GOOD_GUY and game.state.winner() is None and game.state.round == max_rounds
        ),
        "trained_win": float(winner == trainable_target),
        "rounds": float(game.state.round),
        "invalid_action_rate": sum(s.invalid for s in seats) / max(sum(s.actions for s in seats), 1),
        "invalid_action_rate_trained": sum(s.invalid for s in trained) / max(sum(s.actions for s in trained), 1),
        "wolf_votes_matched": game.wolf_days_matched / max(game.wolf_days, 1),
        "wolf_votes_eliminating": game.wolf_votes_eliminating / max(game.wolf_votes, 1),
    }
    for role in dict.fromkeys(ROLES):
        side = WEREWOLF if role == WEREWOLF else GOOD_GUY
        metrics[f"role/{role}/win_rate"] = float(winner == side)
    return metrics


class WerewolfArgs(WorkflowArgs):
    """The game's `workflow_args`."""

    trainable_target: Literal["werewolf", "good_guy"] = WEREWOLF
    """The side that learns; the other side's players are the frozen participant model."""
    max_rounds: int = Field(5, ge=1)
    """Rounds (a night and a day each) the good side must survive to win."""
    speech_tokens: int = Field(24, ge=1)
    """The reply budget of a day speech."""
    full_history: bool = False
    """Keep the whole game in each player's one conversation instead of a fresh one per round from a one-line
    record (the prefix cache makes it cost about what the short prompts cost)."""
    vote_credit: float = 0.0
    """Turn reward for a trained werewolf's vote that names the good player its living mate voted (0: off)."""
    elimination_credit: float = 0.0
    """Turn reward for a trained werewolf's vote that names the good player the vote puts out (0: off)."""
    train_speech: bool = True
    """false has the participant model make the trained side's speeches, so only its decisions train."""
    participant: str = "participant"
    """The name of the frozen auxiliary model that plays the untrained side."""
    broken_reward: float = -0.1
    """Every trained player's reward when the game could not continue."""


@takes_args(WerewolfArgs)
async def werewolf(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    args = WerewolfArgs.of(task)
    target, name, max_rounds = args.trainable_target, args.participant, args.max_rounds
    if name not in auxiliary_models:
        raise KeyError(
            f"werewolf needs a frozen model auxiliary_models[{name!r}] for the untrained players (have "
            f"{sorted(auxiliary_models)})"
        )
    state = GameState.deal(int(task["seed"]))
    seats = seat_players(state, target, model, auxiliary_models[name], max_rounds, args.train_speech)
    game = Game(state, seats, args.speech_tokens, args.full_history, args.vote_credit, args.elimination_credit)
    trained = [seat.name for seat in game.seats.values() if seat.trained]
    try:
        winner = await game.play(max_rounds)
    except Exception:  # noqa: BLE001 - a game that cannot continue is scored, as in the AgentScope example
        log.warning("werewolf game of task %s could not continue", task.get("task_id"), exc_info=True)
        metrics = {**game_metrics(None, game, target, max_rounds), "broken": 1.0}
        return WorkflowOutput(reward={n: args.broken_reward for n in trained}, metrics=metrics)
    reward = float(winner == target)
    turn_rewards = (
        {seat.name: seat.turn_rewards for seat in game.seats.values() if seat.trained and seat.turn_rewards}
        if game.vote_credit or game.elimination_credit
        else None
    )
    return WorkflowOutput(
        reward={n: reward for n in trained},
        metrics={**game_metrics(winner, game, target, max_rounds), "broken": 0.0},
        response=winner,
        turn_rewards=turn_rewards,
    )
