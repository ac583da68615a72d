"""How far supervised learning on the solved game takes SmolLM2-135M in tic-tac-toe, to compare with the RL runs.

The RL league (`sparring train tictactoe`) learns from one sampled move's outcome and per-move credit at a time.
This script gives the same model, LoRA rank and learning rate the strongest signal there is instead: the perfect
moves themselves. Its positions are every position a player who never gives game value away meets against
perfect play (minimax), for both marks (868 positions, 1,597 perfect moves); each datum is the prompt the
workflow shows there (`TicTacToe.opening` + `prompt`, rendered by the model's chat template) with one perfect
move as the target, weighted 1 / (number of perfect moves), trained by cross-entropy (Tinker's loss) for a
wall-clock budget. The adapter is saved at the given minutes; evaluate each like an RL run's:

    python benchmarks/tictactoe_supervised.py --minutes 10 20 30 45 --out runs/ttt-supervised
    python benchmarks/tictactoe_supervised.py ... --board-view lines --no-example   # the workflow's other prompt
    sparring eval tictactoe --tasks 200 --adapter runs/ttt-supervised/minute-45 \
        --set eval_dataset.workflow_args.opponent=minimax

`--positions threats` trains on the tactics instead: every position legal play reaches in which the mover can
complete a line or has to block one (and not every free cell is a perfect move), 2,724 of them. `--held-out N`
keeps N positions out of training and prints, as it trains, their loss per position and the chance of a perfect
move there with the reply constrained to the free cells (sampled at temperature 1, and greedy), beside a player
that picks uniformly among the free cells: whether the model learns the rule or only the positions it was shown.
`--score ADAPTER ...` trains nothing and prints those scores for saved adapters (an RL run's `best`, or
'untrained'); with `--positions threats --held-out 200` the positions are the tic-tac-toe puzzles' eval split
(`make_puzzles("eval", ...)`), which no puzzle file for training contains.

    python benchmarks/tictactoe_supervised.py --positions threats --held-out 200 --score untrained \\
        runs/tictactoe/checkpoints/lora-0/sampler_weights/best

Measured (docs/results.md): 45 minutes on one core leave the model at 0.16-0.20 non-loss against minimax, below
the 80-step RL league (0.32): fitting the answers by cross-entropy is slow here (loss 0.60-0.73 per datum against
a floor of 0.23), so these adapters bound nothing; they show what the answers alone teach in that time.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sparring import ServiceClient, types
from sparring.envs.tictactoe import TicTacToe
from sparring.envs.tictactoe.rules import Board, best_moves, reached, tactical_positions
from sparring.envs.tictactoe.tasks import hold_out
from sparring.envs.tictactoe.workflow import VIEWS
from sparring.trainer.step import weighted_datum


def positions_against_perfect_play(mark: str) -> list[Board]:
    """Every position with `mark` to move that a player who never gives value away reaches against minimax."""
    return reached(best_moves, lambda board: board.to_move == mark)  # the moves that give no value away, either side's


POSITIONS = {
    "perfect-play": lambda: positions_against_perfect_play("X") + positions_against_perfect_play("O"),
    "threats": tactical_positions,
}


def prompt_tokens(renderer, board: Board, view: str, example: bool) -> list[int]:
    """The workflow's prompt for the mover of `board` (its `board_view` and `example`), rendered for the model."""
    return renderer.render(TicTacToe(board, view=view, example=example).chat(board.to_move.lower()))


def move_datum(renderer, prompt: list[int], cell: int, weight: float) -> types.Datum:
    """The prompt followed by the move `cell`, its token(s) weighted `weight` as the target (no end-of-turn token,
    as the adapters in docs/results.md were trained)."""
    return weighted_datum(prompt, renderer.encode_text(str(cell)), weight)


def perfect_move_data(renderer, boards: list[Board], view: str = "grid", example: bool = True) -> list[types.Datum]:
    """One datum per (position, perfect move), weighted 1 / (perfect moves there) so that a position's datums sum
    to its loss."""
    data = []
    for board in boards:
        prompt, best = prompt_tokens(renderer, board, view, example), best_moves(board)
        data += [move_datum(renderer, prompt, cell, 1.0 / len(best)) for cell in best]
    return data


def reference_losses(boards: list[Board]) -> tuple[float, float]:
    """Loss per position of a player uniform over the free cells, and of one uniform over the perfect moves (the
    floor)."""
    uniform = sum(math.log(len(board.free())) for board in boards) / len(boards)
    floor = sum(math.log(len(best_moves(board))) for board in boards) / len(boards)
    return uniform, floor


@dataclass
class HeldOutScores:
    """How the adapter plays positions it was not trained on."""

    loss: float
    """Cross-entropy of the perfect moves per position (what training lowers on its own positions)."""
    perfect_sampled: float
    """Mean probability of a perfect move with the reply constrained to the free cells at temperature 1 (what the
    workflow samples)."""
    perfect_greedy: float
    """Share of positions whose most probable free cell is a perfect move (temperature 0)."""


async def held_out_scores(client, renderer, boards: list[Board], view: str, example: bool) -> HeldOutScores:
    """The adapter's scores on `boards`, from every free cell's logprob (no update)."""
    data, moves = [], []
    for board in boards:
        prompt = prompt_tokens(renderer, board, view, example)
        data += [move_datum(renderer, prompt, cell, 1.0) for cell in board.free()]
        moves += [(board, cell) for cell in board.free()]
    chances = {}
    for first in range(0, len(data), 64):
        result = await client.forward_async(data[first : first + 64], loss_fn="cross_entropy").result_async()
        for move, datum, output in zip(
            moves[first : first + 64], data[first : first + 64], result.loss_fn_outputs, strict=True
        ):
            chances[move] = math.exp(
                float((output["logprobs"].to_torch() * datum.loss_fn_inputs["weights"].to_torch()).sum())
            )
    loss, sampled, greedy = 0.0, 0.0, 0
    for board in boards:
        best = best_moves(board)
        loss -= sum(math.log(chances[board, cell]) for cell in best) / len(best)
        sampled += sum(chances[board, cell] for cell in best) / sum(chances[board, cell] for cell in board.free())
        greedy += max(board.free(), key=lambda cell: chances[board, cell]) in best
    return HeldOutScores(loss / len(boards), sampled / len(boards), greedy / len(boards))


async def score(args: argparse.Namespace) -> None:
    """Print the held-out scores of each adapter in `args.score` ('untrained' for the base model), no training."""
    _, held_out = hold_out(POSITIONS[args.positions](), args.held_out, args.seed)
    service = ServiceClient()
    for adapter in args.score:
        client = await service.create_lora_training_client_async(base_model=args.model, rank=args.rank, seed=args.seed)
        if adapter != "untrained":
            await client.load_weights(adapter).result_async()
        scores = await held_out_scores(client, client.get_renderer(), held_out, args.board_view, not args.no_example)
        print(
            f"{adapter}: held-out loss/position {scores.loss:.3f}, perfect move "
            f"{scores.perfect_sampled:.3f} sampled, {scores.perfect_greedy:.3f} greedy ({len(held_out)} "
            "positions)",
            flush=True,
        )


async def train(args: argparse.Namespace) -> None:
    service = ServiceClient()
    client = await service.create_lora_training_client_async(base_model=args.model, rank=args.rank, seed=args.seed)
    renderer, boards = client.get_renderer(), POSITIONS[args.positions]()
    boards, held_out = hold_out(boards, args.held_out, args.seed)
    data = perfect_move_data(renderer, boards, args.board_view, not args.no_example)
    print(
        f"{len(boards)} positions, {len(data)} datums ({sum(len(d.model_input.to_ints()) for d in data)} "
        f"tokens), batch {args.batch}, learning rate {args.learning_rate}"
    )
    rng, start, step, epoch = random.Random(args.seed), time.perf_counter(), 0, 0

    async def report_held_out() -> None:
        nonlocal start
        began = time.perf_counter()
        scores = await held_out_scores(client, renderer, held_out, args.board_view, not args.no_example)
        print(
            f"step {step} {(began - start) / 60:.1f} min held-out loss/position {scores.loss:.3f}, perfect "
            f"move {scores.perfect_sampled:.3f} sampled, "
            f"{scores.perfect_greedy:.3f} greedy",
            flush=True,
        )
        start += time.perf_counter() - began  # the training clock does not count the held-out forwards

    if held_out:
        uniform, floor = reference_losses(held_out)
        chance = sum(len(best_moves(board)) / len(board.free()) for board in held_out) / len(held_out)
        print(
            f"{len(held_out)} held-out positions: uniform over the free cells: loss {uniform:.3f}, perfect "
            f"move {chance:.3f}; floor {floor:.3f}"
        )
        await report_held_out()
    recent_losses = []  # loss per datum of the last 10 steps: one batch's is too noisy to read a trend from
    deadlines = sorted(args.minutes)
    out = Path(args.out)
    while deadlines:
        order = list(data)
        rng.shuffle(order)
        epoch += 1
        for first in range(0, len(order), args.batch):
            result = await client.forward_backward_async(
                order[first : first + args.batch], loss_fn="cross_entropy"
            ).result_async()
            await client.optim_step_async(types.AdamParams(learning_rate=args.learning_rate)).result_async()
            step += 1
            minutes = (time.perf_counter() - start) / 60
            recent_losses = [*recent_losses[-9:], result.loss / min(args.batch, len(order) - first)]
            if step % 10 == 0:
                print(
                    f"epoch {epoch} step {step} {minutes:.1f} min loss/datum "
                    f"{sum(recent_losses) / len(recent_losses):.3f} (mean of the last 10 steps)",
                    flush=True,
                )
            if held_out and step % args.held_out_every == 0:
                await report_held_out()
            while deadlines and minutes >= deadlines[0]:
                saved = (
                    await client.save_weights_for_sampler_async(name=f"minute-{deadlines[0]:g}").result_async()
                ).path
                target = out / f"minute-{deadlines[0]:g}"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(saved, target)
                print(f"saved {target} after {minutes:.1f} min, {step} steps, epoch {epoch}", flush=True)
                deadlines.pop(0)
            if not deadlines:
                break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes",
        type=float,
        nargs="+",
        default=[10, 20, 30, 45],
        help="save the adapter after these minutes of training",
    )
    parser.add_argument("--out", default="runs/ttt-supervised", help="folder for the saved adapters")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (the shipped config's)")
    parser.add_argument("--learning-rate", type=float, default=3e-4, help="the shipped config's")
    parser.add_argument("--batch", type=int, default=64, help="datums per optimizer step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--board-view", choices=VIEWS, default="grid", help="the workflow's board_view")
    parser.add_argument("--no-example", action="store_true", help="the workflow's example: false")
    parser.add_argument(
        "--positions",
        choices=POSITIONS,
        default="perfect-play",
        help="the positions met against perfect play, or every position with a win or block to find",
    )
    parser.add_argument(
        "--held-out", type=int, default=0, help="positions kept out of training, their loss printed as it trains"
    )
    parser.add_argument("--held-out-every", type=int, default=50, help="optimizer steps between held-out losses")
    parser.add_argument(
        "--score",
        nargs="+",
        metavar="ADAPTER",
        help="train nothing: print the held-out scores of these adapters ('untrained': the base model)",
    )
    args = parser.parse_args()
    asyncio.run(score(args) if args.score else train(args))


if __name__ == "__main__":
    main()
