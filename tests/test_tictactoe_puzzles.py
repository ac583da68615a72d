"""Tic-tac-toe puzzles and the supervised-ceiling benchmark: one-move puzzles and their rewards, the held-out
positions, the teaching moves and move examples, and one step of the supervised benchmark."""

import argparse
import asyncio
import json
import math
import re
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark
from tictactoe_players import Scripted, run_workflow
from transformers import AutoTokenizer

import sparring.envs.tictactoe
from sparring import (
    ServiceClient,
)
from sparring.envs.tictactoe import (
    TicTacToe,
    make_move_examples,
    make_puzzles,
)
from sparring.envs.tictactoe.rules import (
    Board,
    best_moves,
    completing_cells,
    is_tactical,
    tactical_positions,
    teaching_moves,
)
from sparring.envs.tictactoe.tasks import hold_out
from sparring.models.renderer import get_renderer


def test_a_puzzle_is_one_move_from_its_position_rewarded_when_perfect():
    position = Board.from_moves([1, 4, 2, 5]).compact()  # X to move: 3 wins, 6 only blocks
    for reply, reward in (("3", 1.0), ("6", 0.0)):
        player = Scripted([reply])
        out = run_workflow({"puzzle": position, "workflow_args": {"opponent": "minimax"}}, player)
        assert out.reward == {"x": reward} and out.metrics == {"puzzle_solved_rate": reward, "invalid_action_rate": 0.0}
        assert (
            len(player.seen) == 1 and "1|2|3" in player.seen[0][1]["content"]
        )  # the worked example, then the position
        assert (
            player.seen[0][-1]["content"] == TicTacToe(Board.from_compact(position)).prompt("x") and out.outcome is None
        )
    out = run_workflow(
        {"puzzle": position, "workflow_args": {"free_text": True, "illegal_reward": -0.5}}, Scripted(["pass"])
    )
    assert out.reward == {"x": -0.5} and out.metrics["invalid_action_rate"] == 1.0
    with pytest.raises(ValueError, match="9 characters"):
        run_workflow({"puzzle": "XX"}, Scripted(["1"]))
    with pytest.raises(ValueError, match="finished game"):
        run_workflow({"puzzle": Board.from_moves([1, 4, 2, 5, 3]).compact()}, Scripted(["6"]))


def test_puzzles_hold_out_the_positions_the_supervised_benchmark_scores():
    train, held_out = make_puzzles("train", 2524, seed=3), make_puzzles("eval", 200, seed=5)
    assert {task["puzzle"] for task in held_out} == {
        board.compact() for board in hold_out(tactical_positions(), 200, seed=0)[1]
    }
    assert len({task["puzzle"] for task in train}) == 2524 and not {task["puzzle"] for task in train} & {
        task["puzzle"] for task in held_out
    }
    assert all(task["league"] is False and is_tactical(Board.from_compact(task["puzzle"])) for task in train + held_out)
    folder = Path(sparring.envs.tictactoe.__file__).parent / "data"
    shipped = {
        name: [json.loads(line) for line in (folder / f"{name}.jsonl").read_text().splitlines()]
        for name in ("train", "puzzles", "puzzles_eval", "games_and_puzzles")
    }
    assert shipped["puzzles"] == train and shipped["puzzles_eval"] == held_out  # the shipped files are these calls
    assert shipped["games_and_puzzles"] == shipped["train"] + train[:512]
    with pytest.raises(ValueError, match="has 200 puzzles"):
        make_puzzles("eval", 201, seed=5)


def test_teaching_moves_are_the_perfect_moves_that_win_at_once_or_most_often_against_random_play():
    assert teaching_moves(Board()) == [1, 3, 7, 9]  # every cell draws; a corner wins most often against a random mover
    slow_and_quick = Board.from_moves(
        [1, 4, 2, 5, 9]
    )  # O to move: 6 wins at once; blocking 3 keeps a slower forced win
    assert best_moves(slow_and_quick) == [3, 6] and teaching_moves(slow_and_quick) == [6]
    for board in tactical_positions()[::50]:
        taught = teaching_moves(board)
        assert taught and set(taught) <= set(best_moves(board))
        wins = completing_cells(board, board.to_move)
        assert not wins or taught == sorted(wins)


def test_move_examples_are_the_puzzles_chats_answered_with_their_teaching_moves():
    puzzles, examples = make_puzzles("train", 2524, seed=3), make_move_examples("train", 2524, seed=3)
    shipped = (Path(sparring.envs.tictactoe.__file__).parent / "data" / "move_examples.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in shipped] == examples  # the shipped file is this call
    remaining = iter(examples)
    for puzzle in puzzles:  # each puzzle's examples in turn: one per teaching move, weights summing to 1
        board = Board.from_compact(puzzle["puzzle"])
        answered = [next(remaining) for _ in teaching_moves(board)]
        assert sorted(int(e["messages"][-1]["content"]) for e in answered) == teaching_moves(board)
        assert sum(e["weight"] for e in answered) == pytest.approx(1.0)
        if (
            len(answered) == 1 and puzzle in puzzles[:30]
        ):  # the chat is what the puzzle episode shows; its reply solves it
            *chat, reply = answered[0]["messages"]
            player = Scripted([reply["content"]])
            assert run_workflow(puzzle, player).reward == {board.to_move.lower(): 1.0} and player.seen[0] == chat
    assert next(remaining, None) is None


def test_the_supervised_ceiling_trains_on_the_perfect_moves_and_saves_adapters(tiny_model_dir, tmp_path):
    script = load_benchmark("tictactoe_supervised")
    found_x = script.positions_against_perfect_play("X")
    for mark, count in (("X", 417), ("O", 451)):
        found = script.positions_against_perfect_play(mark)
        assert len(found) == count and all(board.to_move == mark and not board.is_over() for board in found)
    assert (
        Board.from_moves([1, 5]) in found_x and Board.from_moves([1, 2]) not in found_x
    )  # minimax never answers a corner at the edge
    renderer = get_renderer(AutoTokenizer.from_pretrained(tiny_model_dir))
    perfect_play = script.POSITIONS["perfect-play"]()
    data = script.perfect_move_data(renderer, perfect_play)
    assert len(data) == 1597 and sum(sum(d.loss_fn_inputs["weights"].tolist()) for d in data) == pytest.approx(
        417 + 451
    )
    for datum in data:  # the weighted target is the move, a cell number, at the prompt's end
        weighted = [
            token
            for token, weight in zip(
                datum.loss_fn_inputs["target_tokens"].tolist(), datum.loss_fn_inputs["weights"].tolist(), strict=True
            )
            if weight
        ]
        assert renderer.decode(weighted) in {str(cell) for cell in range(1, 10)}
    lines = script.perfect_move_data(renderer, perfect_play, "lines", example=False)
    assert len(lines) == len(data) and "Columns and diagonals" in renderer.decode(lines[0].model_input.to_ints())
    assert len(lines[0].model_input.to_ints()) < len(data[0].model_input.to_ints())  # no example: a shorter prompt
    threats = tactical_positions()
    assert len(threats) == len(set(threats)) == 2724
    for board in threats:  # a line to complete or block, and a wrong move to make
        assert completing_cells(board, board.to_move) | completing_cells(board, board.waiting)
        assert not board.is_over() and set(best_moves(board)) < set(board.free())
    assert Board.from_moves([1, 5, 2]) in threats and Board.from_moves([1, 5]) not in threats
    uniform, floor = script.reference_losses([Board.from_moves([1, 5, 2]), Board.from_moves([5, 1, 9])])
    assert uniform == pytest.approx(math.log(6)) and floor == pytest.approx(
        math.log(2) / 2
    )  # o blocks at 3; after 5, 1, 9: 3 or 7
    args = dict(
        model=str(tiny_model_dir), rank=4, seed=0, learning_rate=1e-3, batch=512, minutes=[0], out=str(tmp_path)
    )
    asyncio.run(
        script.train(
            argparse.Namespace(
                **args, board_view="lines", no_example=True, positions="perfect-play", held_out=0, held_out_every=50
            )
        )
    )
    assert (tmp_path / "minute-0" / "adapter_config.json").exists()


def test_the_tactic_bound_rises_with_tactical_accuracy_to_perfect_play():
    script = load_benchmark("tictactoe_tactics")
    assert is_tactical(Board.from_moves([1, 5, 2])) and not is_tactical(Board.from_moves([1, 5]))
    wins = [script.tactic_bound(accuracy, "random") for accuracy in (0.0, 0.5, 0.7, 0.8, 1.0)]
    non_losses = [script.tactic_bound(accuracy, "minimax") for accuracy in (0.0, 0.5, 1.0)]
    assert wins == sorted(wins) and non_losses == sorted(non_losses)
    assert (
        non_losses[-1] == pytest.approx(1.0) and wins[-1] > 0.9
    )  # perfect tactics and play: never lose, win more than minimax
    assert wins[2] < 0.80 < wins[3]  # the 0.80 against the random mover needs tactics right > 70 % of the time


def test_the_supervised_benchmark_keeps_held_out_positions_out_of_training(tiny_model_dir, tmp_path, capsys):
    script = load_benchmark("tictactoe_supervised")
    args = dict(model=str(tiny_model_dir), rank=4, seed=0, learning_rate=1e-3, batch=64, minutes=[0], out=str(tmp_path))
    asyncio.run(
        script.train(
            argparse.Namespace(
                **args, board_view="grid", no_example=True, positions="threats", held_out=20, held_out_every=1
            )
        )
    )
    printed = capsys.readouterr().out
    assert "2704 positions" in printed and "20 held-out positions: uniform over the free cells" in printed
    pattern = r"held-out loss/position ([\d.]+), perfect move ([\d.]+) sampled, ([\d.]+) greedy"
    scores = [tuple(map(float, found.groups())) for found in re.finditer(pattern, printed)]
    assert (
        len(scores) == 2
        and scores[0] != scores[1]
        and all(0 < sampled < 1 and 0 <= greedy <= 1 for _, sampled, greedy in scores)
    )
    asyncio.run(
        script.score(
            argparse.Namespace(
                **args,
                board_view="grid",
                no_example=True,
                positions="threats",
                held_out=20,
                score=["untrained", str(tmp_path / "minute-0")],
            )
        )
    )
    printed = (
        capsys.readouterr().out
    )  # the saved adapter scores as it did when its training stopped; untrained as at step 0
    rescored = [tuple(map(float, found.groups())) for found in re.finditer(pattern, printed)]
    assert len(rescored) == 2 and all(
        got == pytest.approx(trained, abs=2e-3) for got, trained in zip(rescored, scores, strict=True)
    )
    client = ServiceClient().create_lora_training_client(base_model=str(tiny_model_dir), rank=4, seed=0)
    boards = tactical_positions()[:5]
    scores = asyncio.run(script.held_out_scores(client, client.get_renderer(), boards, "grid", True))
    perfect_moves_loss = client.forward(
        script.perfect_move_data(client.get_renderer(), boards), "cross_entropy"
    ).result().loss / len(boards)
    assert scores.loss == pytest.approx(
        perfect_moves_loss, rel=1e-4
    )  # the same cross-entropy, from every free cell's logprob
    assert scores.perfect_greedy in {share / 5 for share in range(6)}
