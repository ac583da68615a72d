"""Two-player turn-based games between chat models and scripted bots.

`TwoPlayerGame` is the part a game writes: whose turn it is, what a player
is shown, how a reply becomes a move, and the result. `play_game` is the
coordinator: it routes each turn to the right player, keeps one conversation
per chat-model player (so a trainable player's turns continue one
conversation and train as one merged sequence; a game that lists a turn's
`choices` gets replies constrained to them), asks scripted bots (plain
functions of the game) for theirs, and ends the game as soon as a reply is
unparsable or illegal: that player forfeits and the other one wins.

Turns inside one game strictly alternate, so one coroutine per game is all
the turn management needed; many games run concurrently because the runner
runs many episodes at once, and their model calls meet in shared batches.
Self-play is just the same policy under two agent names
(`model.as_agent("x", role="player")`), each with its own conversation.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sparring import ChatModel

Bot = Callable[["TwoPlayerGame"], Any | Awaitable[Any]]
"""A scripted player: `bot(game) -> move` (or an awaitable of one); its moves must be legal."""


class TwoPlayerGame(abc.ABC):
    """The rules of one game in progress, as `play_game` drives them."""

    seats: tuple[str, str]
    """The two players' names, in the order they first move."""

    @abc.abstractmethod
    def to_move(self) -> str:
        """The seat whose turn it is."""

    @abc.abstractmethod
    def winner(self) -> str | None:
        """The seat that has won by the rules, if any."""

    @abc.abstractmethod
    def is_over(self) -> bool:
        """True when the game ended by the rules (a win or a draw)."""

    @abc.abstractmethod
    def opening(self, seat: str) -> list[dict]:
        """The messages that open `seat`'s conversation: a system message, perhaps an example exchange."""

    @abc.abstractmethod
    def prompt(self, seat: str) -> str:
        """What `seat` is told at the start of its turn (the position, the opponent's last move)."""

    @abc.abstractmethod
    def parse(self, text: str) -> Any | None:
        """The legal move a reply names for the player to move, or None when it names none."""

    @abc.abstractmethod
    def play(self, move: Any) -> None:
        """Apply a legal move of the player to move."""

    def choices(self, seat: str) -> list[str] | None:
        """The replies `seat` may give this turn, when its chat model's reply is constrained to them (`choices=`);
        None leaves the reply free (the default)."""
        return None


@dataclass
class Turn:
    """One turn as it was played."""

    seat: str
    """Who moved."""
    move: Any | None
    """The move, or None when the reply named no legal move (a forfeit)."""
    reply: str | None = None
    """A chat model's reply text; None for a bot."""


@dataclass
class GameRecord:
    """How one game went."""

    turns: list[Turn] = field(default_factory=list)
    """Every turn in order, the forfeited one included."""
    winner: str | None = None
    """The seat that won (by the rules or by the other's forfeit); None for a draw."""
    forfeit: str | None = None
    """The seat whose unparsable or illegal reply ended the game."""

    def moves_by(self, seat: str) -> int:
        """How many turns `seat` took (a forfeited turn counts)."""
        return sum(turn.seat == seat for turn in self.turns)


async def play_game(
    game: TwoPlayerGame,
    players: dict[str, ChatModel | Bot],
    memory: Literal["full", "turn"] = "full",
) -> GameRecord:
    """Play `game` to the end between `players` (one per seat: a chat model or a bot).

    With `memory="full"` a chat model sees its whole conversation (earlier
    positions and its own replies); with "turn" it sees only the opening
    messages and the current turn's prompt, a fresh conversation each turn.
    """
    if set(players) != set(game.seats):
        raise ValueError(f"players {sorted(players)} do not match the game's seats {sorted(game.seats)}")
    if memory not in ("full", "turn"):
        raise ValueError(f"memory must be 'full' or 'turn', got {memory!r}")
    openings = {seat: game.opening(seat) for seat in game.seats}
    conversations = {seat: list(openings[seat]) for seat in game.seats}
    record = GameRecord()
    while not game.is_over():
        seat = game.to_move()
        player = players[seat]
        if isinstance(player, ChatModel):
            history = conversations[seat] if memory == "full" else list(openings[seat])
            history.append({"role": "user", "content": game.prompt(seat)})
            options = game.choices(seat)
            reply = await player(
                list(history), **({"choices": options} if options else {})
            )  # a copy: transcripts keep the messages as sent
            history.append(reply.message)
            move, text = game.parse(reply.content), reply.content
        else:
            move, text = player(game), None
            move = await move if inspect.isawaitable(move) else move
        record.turns.append(Turn(seat, move, text))
        if move is None:
            record.forfeit = seat
            record.winner = next(other for other in game.seats if other != seat)
            return record
        game.play(move)
    record.winner = game.winner()
    return record
