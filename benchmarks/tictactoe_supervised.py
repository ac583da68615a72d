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

Measured (docs/results.md): 45 minutes on one core leave the model at 0.16-0.20 non-loss against minimax, below
the 80-step RL league (0.32): fitting the answers by cross-entropy is slow here (loss 0.60-0.73 per datum against
a floor of 0.23), so these adapters bound nothing; they show what the answers alone teach in that time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import time
from pathlib import Path

from sparring import ServiceClient, types
from sparring.envs.tictactoe import TicTacToe
from sparring.envs.tictactoe.workflow import VIEWS
from sparring.envs.tictactoe.rules import Board, best_moves


def positions_against_perfect_play(mark: str) -> list[Board]:
    """Every position with `mark` to move that a player who never gives value away reaches against minimax."""
    seen, stack, found = set(), [Board()], []
    while stack:
        board = stack.pop()
        if board.cells in seen or board.is_over():
            continue
        seen.add(board.cells)
        if board.to_move == mark:
            found.append(board)
        stack += [board.play(cell) for cell in best_moves(board)]  # the moves that give no value away, either side's
    return found


def perfect_move_data(renderer, view: str = "grid", example: bool = True) -> list[types.Datum]:
    """One datum per (position, perfect move): the workflow's prompt there (its `board_view` and `example`), the move
    as the target token(s)."""
    data = []
    for mark in ("X", "O"):
        for board in positions_against_perfect_play(mark):
            game, seat = TicTacToe(board, view=view, example=example), mark.lower()
            prompt = renderer.render([*game.opening(seat), {"role": "user", "content": game.prompt(seat)}])
            best = best_moves(board)
            for cell in best:
                reply = renderer.encode_text(str(cell))
                tokens = prompt + reply
                weights = [0.0] * (len(prompt) - 1) + [1.0 / len(best)] * len(reply)
                data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights}))
    return data


async def train(args: argparse.Namespace) -> None:
    service = ServiceClient()
    client = await service.create_lora_training_client_async(base_model=args.model, rank=args.rank, seed=args.seed)
    data = perfect_move_data(client.get_renderer(), args.board_view, not args.no_example)
    print(f"{len(data)} datums ({sum(len(d.model_input.to_ints()) for d in data)} tokens), batch {args.batch}, learning rate {args.learning_rate}")
    rng, start, step, epoch = random.Random(args.seed), time.perf_counter(), 0, 0
    recent_losses = []  # loss per datum of the last 10 steps: one batch's is too noisy to read a trend from
    deadlines = sorted(args.minutes)
    out = Path(args.out)
    while deadlines:
        order = list(data)
        rng.shuffle(order)
        epoch += 1
        for first in range(0, len(order), args.batch):
            result = await client.forward_backward_async(order[first : first + args.batch], loss_fn="cross_entropy").result_async()
            await client.optim_step_async(types.AdamParams(learning_rate=args.learning_rate)).result_async()
            step += 1
            minutes = (time.perf_counter() - start) / 60
            recent_losses = [*recent_losses[-9:], result.loss / min(args.batch, len(order) - first)]
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} {minutes:.1f} min loss/datum {sum(recent_losses) / len(recent_losses):.3f} (mean of the last 10 steps)", flush=True)
            while deadlines and minutes >= deadlines[0]:
                saved = (await client.save_weights_for_sampler_async(name=f"minute-{deadlines[0]:g}").result_async()).path
                target = out / f"minute-{deadlines[0]:g}"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(saved, target)
                print(f"saved {target} after {minutes:.1f} min, {step} steps, epoch {epoch}", flush=True)
                deadlines.pop(0)
            if not deadlines:
                break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[10, 20, 30, 45], help="save the adapter after these minutes of training")
    parser.add_argument("--out", default="runs/ttt-supervised", help="folder for the saved adapters")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (the shipped config's)")
    parser.add_argument("--learning-rate", type=float, default=3e-4, help="the shipped config's")
    parser.add_argument("--batch", type=int, default=64, help="datums per optimizer step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--board-view", choices=VIEWS, default="grid", help="the workflow's board_view")
    parser.add_argument("--no-example", action="store_true", help="the workflow's example: false")
    asyncio.run(train(parser.parse_args()))


if __name__ == "__main__":
    main()
