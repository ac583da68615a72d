"""Tic-tac-toe: self-play, or the policy against a scripted or frozen opponent.

One episode is one game between seats "x" and "o" (X moves first), driven by
the two-player coordinator in `envs/common/turns.py`. `workflow_args.opponent` picks who
plays against the policy:

- `self` (default): the policy plays both seats, as agents "x" and "o" of
  role "player"; both sides' moves train it, and their advantages are
  computed together across the group;
- `random` / `minimax`: a Python bot (uniform random, or perfect play);
- any other name: that auxiliary model, e.g. `base` (the frozen base model)
  or `snapshot` (a frozen snapshot of the policy from an earlier step, see
  `TunerModelConfig.snapshot_of`). An auxiliary model of that name comes
  first, so a league (`league:` in the config, docs/league.md) hands each
  training game its drawn opponent this way; the game reports its `outcome`
  (win / draw / loss of the trained side) for the league's records.

Against an opponent the policy plays the task's `side` (or `workflow_args
.side`; else X for even seeds, O for odd ones). A player sees the board with
the free cells numbered (after one worked example exchange, which is what
makes a 135M model answer with a bare number) and answers with a number: a
chat model's reply is constrained to the free cells (`choices=`), unless
`workflow_args.free_text` is true; then the first number in the reply that
names a free cell is its move, and a reply that names none ends the game: the
mover gets `illegal_reward`, the other side wins. `workflow_args.memory` ("full", default, or "turn") says whether a
player sees its earlier turns (one merged training sequence per player) or
only the current position. `workflow_args.board_view` ("grid", default, or "lines") adds, under the grid, the
columns and diagonals written like its rows ("X|4|7;2|O|8;..."): two marks on a column or a diagonal then sit in
adjacent tokens for the model to read, as on a row, instead of a row apart. `workflow_args.example` (true) keeps
the worked example exchange before the game; without it the prompts are shorter (a constrained reply is a free
cell either way).

Rewards per seat: `win_reward` 1, `draw_reward` 0, `loss_reward` -1,
`illegal_reward` -1. `workflow_args.move_credit` (0, off) adds per-move
credit: a turn reward of that size for every move of a trained seat that
takes a win or blocks the opponent's. `workflow_args.value_credit` (0, off)
charges each move what it gives away under perfect play (the solved game's
value: a drawn game thrown costs 1 x value_credit, a won game lost 2 x): a
teacher's per-move reward, which only a solved game can give. `workflow_args.chance_credit` (0, off) charges
each move the expected score it gives away against a uniformly random opponent (the mover playing on to
maximise it): among the moves perfect play allows, it prefers the ones that win more often. Metrics: `win_rate` /
`draw_rate` / `loss_rate` of the trained side, the same win rate as `role/player/win_rate`,
`agent/<seat>/win_rate` and `vs_<opponent>/win_rate`, `invalid_action_rate`
(illegal or unparsable replies per policy move), `forfeit_rate`, `turns`, `blunder_rate` (the share of the
trained side's moves that give game value away under perfect play: what the policy plays, whoever it meets), and
two kinds of blunder by the same count: `missed_win_rate` (a line of its own to complete, and it played elsewhere)
and `missed_block_rate` (no win of its own, the opponent's line left open), and `threat_rate`, the share of its
moves made where a line was there to complete or block: 1 - (missed_win_rate + missed_block_rate) / threat_rate
is how often it found the tactic.

`workflow_args.opening_plies` (0, off; at most 4) is a curriculum over positions: before the players move, a
scripted opening (`workflow_args.opening`: "minimax", perfect play for both sides, the default, or "random") plays
between 0 and that many plies, their number and moves drawn from the task's seed, so every game of a group starts
from the same position and the policy trains on mid-game positions it would rarely reach by itself (measured
worse against minimax than without it: docs/results.md).

A task with `puzzle` (a position, `Board.compact`'s text) is a one-move episode instead (`solve_puzzle`): the side
to move there moves once, reward 1 for a perfect move and 0 for another, metric `puzzle_solved_rate`; eight samples
of one position make a group with an exact baseline for that single decision, which a whole game credits only
through its result. `tasks.make_puzzles` draws them from the tactical positions.

    sparring train tictactoe        # this folder's config.yaml: a league of opponents
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field

from sparring import ChatModel, WorkflowArgs, WorkflowOutput, takes_args

from ..common import Bot, GameRecord, TwoPlayerGame, play_game
from .rules import (
    Board,
    best_moves,
    completing_cells,
    minimax_move,
    parse_move,
    random_move,
    score_given_away_to_chance,
    tactic_cells,
    value_given_away,
)

SEATS = ("x", "o")
ROLE = "player"
SCRIPTED = {"random": random_move, "minimax": minimax_move}
SYSTEM = "You play tic-tac-toe as {mark}. Reply with one number only."
PROMPT = "{board}\nPick one of these free cells: {free}."
VIEWS = ("grid", "lines")
PUZZLE_KEY = "puzzle"
"""A task with a position here (`Board.compact`'s text) is a puzzle: the mover there makes one move, no opponent."""


class TicTacToeArgs(WorkflowArgs):
    """The game's `workflow_args`."""

    opponent: str = "self"
    """Who plays against the policy: 'self' (the policy plays both seats), 'random' or 'minimax' (a Python bot), or
    an auxiliary model's name (a league's drawn opponent arrives here)."""
    side: Literal["x", "o"] | None = None
    """The policy's seat against an opponent when the task names none; None: X for even seeds, O for odd ones."""
    memory: Literal["full", "turn"] = "full"
    """'full': a player sees its earlier turns (one merged training sequence per player); 'turn': only the current
    position."""
    board_view: Literal["grid", "lines"] = "grid"
    """'lines' adds the columns and diagonals written like rows under the grid, so two marks on a line sit in
    adjacent tokens."""
    example: bool = True
    """Keep the worked example exchange before the game (what makes a 135M model answer with a bare number)."""
    free_text: bool = False
    """Let replies be free text (the first free cell named is the move) instead of constraining them to the free
    cells."""
    win_reward: float = 1.0
    """A seat's reward for a win."""
    draw_reward: float = 0.0
    """A seat's reward for a draw."""
    loss_reward: float = -1.0
    """A seat's reward for a loss."""
    illegal_reward: float = -1.0
    """The reward of a seat whose free-text reply names no free cell (the game ends, the other side wins)."""
    move_credit: float = 0.0
    """Turn reward for each trained move that takes a win or blocks the opponent's (0: off)."""
    value_credit: float = 0.0
    """Charge each trained move this times the game value it gives away under perfect play (0: off)."""
    chance_credit: float = 0.0
    """Charge each trained move this times the expected score it gives away against a random opponent (0: off)."""
    opening_plies: int = Field(0, ge=0, le=4)
    """A curriculum over positions: a scripted opening plays 0 to this many plies first (at most 4: a line can be
    completed from the 5th ply on)."""
    opening: Literal["minimax", "random"] = "minimax"
    """Who plays the scripted opening: perfect play for both sides, or random moves."""

    def seat_reward(self, record: GameRecord, seat: str) -> float:
        """`seat`'s reward for the game `record`."""
        if record.forfeit == seat:
            return self.illegal_reward
        if record.winner is None:
            return self.draw_reward
        return self.win_reward if record.winner == seat else self.loss_reward


class TicTacToe(TwoPlayerGame):
    """A game of tic-tac-toe between seats 'x' and 'o', shown as text."""

    seats = SEATS

    def __init__(self, board: Board | None = None, constrained: bool = True, view: str = "grid", example: bool = True):
        if view not in VIEWS:
            raise ValueError(f"board_view must be one of {VIEWS}, got {view!r}")
        self.board = board or Board()
        self.constrained = constrained
        self.view = view
        self.example = example

    def to_move(self) -> str:
        return self.board.to_move.lower()

    def winner(self) -> str | None:
        mark = self.board.winner()
        return mark.lower() if mark else None

    def is_over(self) -> bool:
        return self.board.is_over()

    def opening(self, seat: str) -> list[dict]:
        # One worked exchange before the game: SmolLM2-135M then starts ~9 replies in 10 with a number (~1 in 10
        # without), which a free-text reply needs and a constrained one does not.
        example = (
            [{"role": "user", "content": self.show(Board())}, {"role": "assistant", "content": "5"}]
            if self.example
            else []
        )
        return [{"role": "system", "content": SYSTEM.format(mark=seat.upper())}, *example]

    def prompt(self, seat: str) -> str:
        return self.show(self.board)

    def chat(self, seat: str) -> list[dict]:
        """What `seat` is shown before it moves (with `memory: turn`): the opening messages, then the board."""
        return [*self.opening(seat), {"role": "user", "content": self.prompt(seat)}]

    def show(self, board: Board) -> str:
        """The board as the view draws it, then the free cells to pick from."""
        drawn = board.render() + ("\n" + board.render_lines() if self.view == "lines" else "")
        return PROMPT.format(board=drawn, free=", ".join(str(cell) for cell in board.free()))

    def choices(self, seat: str) -> list[str] | None:
        return [str(cell) for cell in self.board.free()] if self.constrained else None

    def parse(self, text: str) -> int | None:
        return parse_move(text, self.board)

    def play(self, move: int) -> None:
        self.board = self.board.play(move)


class OneMove(TicTacToe):
    """A puzzle: the game from a given position, over once the side to move there has moved."""

    def __init__(self, board: Board, constrained: bool, view: str, example: bool):
        super().__init__(board, constrained, view, example)
        self.start = board

    def is_over(self) -> bool:
        return self.board != self.start or super().is_over()


def opponent_player(
    name: str, seat: str, auxiliary_models: dict[str, ChatModel], rng: random.Random
) -> ChatModel | Bot:
    """The auxiliary model of that name (a league's drawn opponent among them), else a scripted bot ('random',
    'minimax'), playing `seat`."""
    if name in auxiliary_models:
        return auxiliary_models[name].as_agent(seat, role="opponent")
    if name in SCRIPTED:
        choose = SCRIPTED[name]
        return lambda game: choose(game.board, rng)
    raise ValueError(
        f"unknown opponent {name!r}: use 'self', {', '.join(repr(n) for n in SCRIPTED)} or an auxiliary "
        f"model ({sorted(auxiliary_models)})"
    )


def game_metrics(
    record: GameRecord, replayed: list[tuple[Board, int | None]], trained: list[str], opponent: str
) -> dict[str, float]:
    """Outcome rates of the trained seats (averaged over them), per seat and per opponent; `replayed` is the game's
    `positions`."""
    wins = [float(record.winner == seat) for seat in trained]
    losses = [float(record.winner not in (None, seat)) for seat in trained]
    win_rate = sum(wins) / len(trained)
    moves = sum(record.moves_by(seat) for seat in trained)
    played = [
        (board, move)
        for turn, (board, move) in zip(record.turns, replayed, strict=True)
        if turn.seat in trained and move is not None
    ]
    metrics = {
        "win_rate": win_rate,
        "draw_rate": float(record.winner is None),
        "loss_rate": sum(losses) / len(trained),
        f"role/{ROLE}/win_rate": win_rate,
        f"vs_{opponent}/win_rate": win_rate,
        "invalid_action_rate": float(record.forfeit in trained) / moves if moves else 0.0,
        "forfeit_rate": float(record.forfeit in trained),
        "turns": float(len(record.turns)),
        "blunder_rate": share(played, lambda board, move: value_given_away(board, move) > 0),
        "missed_win_rate": share(played, missed_win),
        "missed_block_rate": share(played, missed_block),
        "threat_rate": share(played, threatened),
    }
    metrics.update({f"agent/{seat}/win_rate": won for seat, won in zip(trained, wins, strict=True)})
    return metrics


def share(played: list[tuple[Board, int]], test) -> float:
    """The share of the (position, move) pairs for which `test` holds (0 for none played)."""
    return sum(bool(test(board, move)) for board, move in played) / len(played) if played else 0.0


def missed_win(board: Board, move: int) -> bool:
    """The mover could complete a line and played elsewhere."""
    wins = completing_cells(board, board.to_move)
    return bool(wins) and move not in wins


def threatened(board: Board, move: int) -> bool:
    """The mover had a line to complete or the opponent's to block (whatever it played)."""
    return bool(tactic_cells(board))


def missed_block(board: Board, move: int) -> bool:
    """With no win of its own, the mover left every cell that completes the opponent's line open."""
    threats = completing_cells(board, board.waiting)
    return not completing_cells(board, board.to_move) and bool(threats) and move not in threats


def outcome_of(record: GameRecord, seat: str) -> str:
    """'win', 'draw' or 'loss' for `seat` (a forfeit loses)."""
    return "draw" if record.winner is None else "win" if record.winner == seat else "loss"


def positions(record: GameRecord, start: Board) -> list[tuple[Board, int | None]]:
    """Each turn's position (from `start`) before its move, with the move (None for a forfeited turn)."""
    board, seen = start, []
    for turn in record.turns:
        seen.append((board, turn.move))
        if turn.move is not None:
            board = board.play(turn.move)
    return seen


def move_credit(
    record: GameRecord,
    replayed: list[tuple[Board, int | None]],
    trained: list[str],
    credit: float,
    value_credit: float,
    chance_credit: float = 0.0,
) -> dict[str, list[float]]:
    """Per trained seat, one turn reward per move: `credit` for a move that completes its line (takes a win) or the
    opponent's (blocks one), minus `value_credit` for every unit of game value the move gives away under perfect
    play (`value_given_away`) and `chance_credit` for every unit of expected score it gives away against random
    play (`score_given_away_to_chance`); 0 for a forfeited turn (its loss is the game's reward)."""
    rewards: dict[str, list[float]] = {seat: [] for seat in trained}
    for turn, (board, move) in zip(record.turns, replayed, strict=True):
        if turn.seat in rewards:
            reward = 0.0
            if move is not None:
                reward += credit if move in tactic_cells(board) else 0.0
                reward -= value_credit * value_given_away(board, move)
                reward -= chance_credit * score_given_away_to_chance(board, move)
            rewards[turn.seat].append(reward)
    return rewards


def opening_position(args: TicTacToeArgs, seed: int) -> Board:
    """The position the game starts from: the empty board, or after a scripted opening of 0 to `opening_plies`
    plies drawn from the seed."""
    rng, board = random.Random(f"opening/{seed}"), Board()
    for _ in range(rng.randint(0, args.opening_plies)):
        board = board.play(SCRIPTED[args.opening](board, rng))
    return board


def other_seat(seat: str) -> str:
    """The seat that is not `seat`."""
    return "o" if seat == "x" else "x"


def policy_side(task: dict, args: TicTacToeArgs, seed: int) -> str:
    side = str(task.get("side") or args.side or ("x" if seed % 2 == 0 else "o")).lower()
    if side not in SEATS:
        raise ValueError(f"side must be 'x' or 'o', got {side!r}")
    return side


async def solve_puzzle(task: dict, model: ChatModel) -> WorkflowOutput:
    """One move from the task's position: reward 1 for a perfect move (`best_moves`), 0 for another, the
    `illegal_reward` for a free-text reply that names no free cell."""
    args, board = TicTacToeArgs.of(task), Board.from_compact(str(task[PUZZLE_KEY]))
    if board.is_over():
        raise ValueError(f"puzzle {task[PUZZLE_KEY]!r} is a finished game: there is no move to make")
    seat = board.to_move.lower()
    game = OneMove(board, not args.free_text, args.board_view, args.example)
    # The game ends before the other seat's turn: its bot never plays.
    record = await play_game(
        game, {seat: model.as_agent(seat, role=ROLE), other_seat(seat): lambda game: None}, memory="turn"
    )
    move = record.turns[0].move
    solved = move is not None and move in best_moves(board)
    reward = args.illegal_reward if move is None else float(solved)
    return WorkflowOutput(
        reward={seat: reward},
        metrics={"puzzle_solved_rate": float(solved), "invalid_action_rate": float(move is None)},
        response=[(seat, move)],
    )


@takes_args(TicTacToeArgs)
async def tictactoe(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    if PUZZLE_KEY in task:
        return await solve_puzzle(task, model)
    args = TicTacToeArgs.of(task)
    opponent = args.opponent
    seed = int(task.get("seed", 0))
    if opponent == "self":
        trained = list(SEATS)
        players: dict = {seat: model.as_agent(seat, role=ROLE) for seat in SEATS}
    else:
        side = policy_side(task, args, seed)
        other = other_seat(side)
        trained = [side]
        players = {
            side: model.as_agent(side, role=ROLE),
            other: opponent_player(opponent, other, auxiliary_models, random.Random(seed)),
        }
    start = opening_position(args, seed)
    game = TicTacToe(start, not args.free_text, args.board_view, args.example)
    record = await play_game(game, players, memory=args.memory)
    credit, value_credit, chance_credit = args.move_credit, args.value_credit, args.chance_credit
    replayed = positions(record, start)
    return WorkflowOutput(
        reward={seat: args.seat_reward(record, seat) for seat in trained},
        metrics=game_metrics(record, replayed, trained, opponent),
        response=[(turn.seat, turn.move) for turn in record.turns],
        turn_rewards=move_credit(record, replayed, trained, credit, value_credit, chance_credit)
        if credit or value_credit or chance_credit
        else None,
        outcome=outcome_of(record, trained[0]) if len(trained) == 1 else None,
    )
