"""Scripted baselines: the scripted chat model in the trainable slot, and each game's baselines playing the real
workflows to known values (per-episode estimates of them included). The 95 % intervals: tests/test_intervals.py;
the `baselines:` config and the comparison from `tune()` and `sparring eval`: tests/test_baseline_comparison.py."""

import asyncio
import math
import random

import pytest

from sparring import (
    ScriptedChatModel,
    TunerHandle,
    WorkflowOutput,
)
from sparring.algorithms import Estimate, wilson_interval
from sparring.envs import guess_number as gn
from sparring.envs import load_game_config
from sparring.envs import tictactoe as ttt
from sparring.envs import twenty_questions as tq
from sparring.envs import werewolf as ww
from sparring.envs.common import read_template
from sparring.envs.guess_number import baselines as gn_baselines
from sparring.envs.guess_number import rules as gn_rules
from sparring.envs.tictactoe import baselines as ttt_baselines
from sparring.envs.tictactoe import workflow as ttt_workflow
from sparring.envs.tictactoe.rules import Board
from sparring.envs.twenty_questions import baselines as tq_baselines
from sparring.envs.twenty_questions import rules as tq_rules
from sparring.rollout import EpisodeRecorder, as_episode_fn, recording, run_episodes
from sparring.rollout.runner import RunnerSettings
from sparring.trainer import load_train_and_eval_tasks
from sparring.trainer.evaluation import estimates_of


def play(workflow, tasks, policy, auxiliary=None, seed=0):
    """Each task once, `policy` scripted in the trainable slot; the episodes as the runner returns them."""
    scripted = ScriptedChatModel.seeded(policy, name=getattr(policy, "__name__", "scripted"), seed=seed)
    settings = RunnerSettings(group_size=1, max_concurrency=64, episode_timeout_s=60)
    make_tuner = lambda: TunerHandle(policies={"policy": scripted}, auxiliary_models=auxiliary or {})  # noqa: E731
    return asyncio.run(run_episodes(as_episode_fn(workflow), tasks, make_tuner, settings))


# --- the scripted chat model -------------------------------------------------------------------


def test_a_scripted_model_answers_like_a_model_and_its_agent_is_rewarded_without_training_data():
    async def polite(messages, rng):
        await asyncio.sleep(0)
        return f"{len(messages)} messages"

    model = ScriptedChatModel.seeded(polite, name="polite").as_agent("x", role="player")
    recorder = EpisodeRecorder()

    async def two_calls():
        with recording(recorder):
            first = await model([{"role": "user", "content": "hi"}], max_tokens=3)
            second = await model(
                [{"role": "user", "content": "hi"}, first.message, {"role": "user", "content": "again"}]
            )
        return first, second

    first, second = asyncio.run(two_calls())
    assert first.message == {"role": "assistant", "content": "1 messages"} and second.content == "3 messages"
    assert first.tokens == [] and first.logprobs == [] and not model.trainable
    assert recorder.calls == [] and recorder.policy_calls() == {"x": 2} and recorder.roles == {"x": "player"}
    assert [entry["scripted"] for entry in recorder.transcripts["x"]] == ["polite", "polite"]

    episode = play(gn.guess_number, [{"secret": 8, "workflow_args": {"max_turns": 4}}], gn.binary_search)[0]
    assert episode.error is None and episode.timelines == [] and episode.num_calls == 0
    assert episode.rewards == {"policy": pytest.approx(1.375)} and episode.metrics["success"] == 1.0


def test_a_policy_that_returns_no_reply_is_a_clear_error_and_turn_rewards_count_scripted_calls():
    with pytest.raises(TypeError, match="scripted policy 'bad' returned 7"):
        asyncio.run(ScriptedChatModel.seeded(lambda messages, rng: 7, name="bad")([{"role": "user", "content": "hi"}]))

    async def per_turn(task, model, auxiliary_models):
        for _ in range(3):
            await model([{"role": "user", "content": "go"}])
        return WorkflowOutput(reward=1.0, turn_rewards=[0.0, 0.5, 0.5])

    episode = play(per_turn, [{}], lambda messages, rng: "ok")[0]
    assert episode.error is None and episode.turn_rewards == {"policy": [0.0, 0.5, 0.5]}


# --- guess the number ----------------------------------------------------------------------------


def test_binary_search_solves_exactly_15_of_the_16_secrets_in_4_guesses_and_all_in_5():
    tasks = [{"secret": secret, "workflow_args": {"low": 1, "high": 16, "max_turns": 4}} for secret in range(1, 17)]
    episodes = play(gn.guess_number, tasks, gn.binary_search)
    solved = [e.task["secret"] for e in episodes if e.metrics["success"] == 1.0]
    assert len(solved) == 15 and 16 not in solved
    assert all(e.metrics["invalid_rate"] == 0.0 for e in episodes)
    five = [{**task, "workflow_args": {"low": 1, "high": 16, "max_turns": 5}} for task in tasks]
    assert all(e.metrics["success"] == 1.0 for e in play(gn.guess_number, five, gn.binary_search))


def test_guess_number_credits_each_guess_by_the_share_of_possible_numbers_it_rules_out():
    # Secret 5 in 1..16: 8 halves (1 - (49 + 64) / 256), 9 ignores "lower than 8", None is invalid,
    # 1 is consistent but at the end of 1..7 (1 - 36 / 49), 4 is the last guess of 2..7 (1 - (4 + 9) / 36).
    assert gn_rules.guess_progress(5, [8, 9, None, 1, 4], 1, 16) == pytest.approx(
        [1 - 113 / 256, 0.0, 0.0, 1 - 36 / 49, 1 - 13 / 36]
    )
    tasks = [
        {"secret": secret, "workflow_args": {"low": 1, "high": 16, "max_turns": 4, "progress_bonus": 1.0}}
        for secret in range(1, 17)
    ]
    halving = [e.metrics["progress"] for e in play(gn.guess_number, tasks, gn.binary_search)]
    counting = [
        e.metrics["progress"]
        for e in play(
            gn.guess_number, tasks, lambda messages, rng: str(1 + sum(m["role"] == "assistant" for m in messages))
        )
    ]
    assert min(halving) > 0.4 and sum(halving) / 16 > 2 * sum(counting) / 16
    for episode in play(gn.guess_number, tasks, gn.binary_search):  # bonus 1: the turn rewards are the progress
        (turn_rewards,) = episode.turn_rewards.values()
        assert (
            sum(turn_rewards) / len(turn_rewards) == pytest.approx(episode.metrics["progress"])
            and min(turn_rewards) > 0
        )
    rates = [e.metrics["consistent_rate"] for e in play(gn.guess_number, tasks * 20, gn.random_valid)]
    assert 0.4 < sum(rates) / len(rates) < 0.8


def test_random_valid_guesses_in_range_and_solves_about_one_in_four():
    tasks = [{"secret": 1 + i % 16, "workflow_args": {"low": 1, "high": 16, "max_turns": 4}} for i in range(1600)]
    episodes = play(gn.guess_number, tasks, gn.random_valid)
    assert all(e.metrics["invalid_rate"] == 0.0 for e in episodes)
    rate = sum(e.metrics["success"] for e in episodes) / len(episodes)
    assert rate == pytest.approx(1 - (15 / 16) ** 4, abs=0.04)  # 0.2275 with four independent uniform guesses


def test_the_guess_number_baselines_follow_the_referee_and_rules_wording(monkeypatch):
    monkeypatch.setattr(gn_rules, "RULES", "Secret between {low} and {high} (inclusive).")
    monkeypatch.setattr(
        gn_rules,
        "referee",
        lambda guess, secret, low, high: "Bingo!" if guess == secret else ("Lower." if guess > secret else "Higher."),
    )
    tasks = [{"secret": secret, "workflow_args": {"low": 1, "high": 16, "max_turns": 4}} for secret in range(1, 17)]
    assert sum(e.metrics["success"] for e in play(gn.guess_number, tasks, gn.binary_search)) == 15
    assert (
        gn_baselines.feedback_direction("Higher.", 5, 1, 16) == "higher"
        and gn_baselines.feedback_direction("Lower.", 5, 1, 16) == "lower"
    )
    assert gn_baselines.feedback_direction("Bingo!", 5, 1, 16) is None


def test_read_template_recovers_the_fields_a_template_filled_in():
    assert read_template(gn_rules.RULES, "Hello. " + gn_rules.RULES.format(low=3, high=40)) == {
        "low": "3",
        "high": "40",
    }
    assert read_template(
        tq_rules.CANDIDATES, "You have 6 questions." + tq_rules.CANDIDATES.format(words="cat, dog")
    ) == {"words": "cat, dog"}
    assert read_template("{a} then {a}", "x then y") is None
    assert read_template(gn_rules.RULES, "nothing here") is None


# --- tic-tac-toe ------------------------------------------------------------------------------


def test_read_board_gives_back_the_position_a_prompt_shows():
    board = Board.from_moves([5, 1, 9, 3])
    prompt = ttt_workflow.PROMPT.format(board=board.render(), free=", ".join(map(str, board.free())))
    assert ttt_baselines.read_board(prompt) == board
    with pytest.raises(ValueError, match="no tic-tac-toe board"):
        ttt_baselines.read_board("Pick a cell.")


def test_minimax_never_loses_to_random_and_random_never_beats_minimax():
    tasks = [{"seed": seed, "side": "xo"[seed % 2], "workflow_args": {"opponent": "random"}} for seed in range(60)]
    perfect = play(ttt.tictactoe, tasks, ttt.minimax)
    assert all(e.error is None and e.metrics["invalid_action_rate"] == 0.0 for e in perfect)
    assert sum(e.metrics["loss_rate"] for e in perfect) == 0 and sum(e.metrics["win_rate"] for e in perfect) >= 40
    assert {e.task["side"] for e in perfect} == {"x", "o"}
    against_perfect = [{**task, "workflow_args": {"opponent": "minimax"}} for task in tasks]
    hopeless = play(ttt.tictactoe, against_perfect, ttt.random_legal)
    assert all(e.metrics["forfeit_rate"] == 0.0 for e in hopeless)
    assert sum(e.metrics["win_rate"] for e in hopeless) == 0 and sum(e.metrics["loss_rate"] for e in hopeless) >= 30


def test_fallible_minimax_blocks_except_on_its_random_moves_and_loses_some_games_to_minimax():
    board = Board.from_moves([1, 5, 2])  # O must take 3 or lose
    prompt = ttt_workflow.PROMPT.format(board=board.render(), free=", ".join(map(str, board.free())))
    rng = random.Random(0)
    moves = [int(ttt.fallible_minimax([{"role": "user", "content": prompt}], rng)) for _ in range(4000)]
    assert set(moves) <= set(board.free())
    expected = ttt_baselines.FALLIBLE_MISTAKE_RATE * 5 / 6  # a random move finds the block 1 time in 6
    assert sum(move != 3 for move in moves) / len(moves) == pytest.approx(expected, abs=0.03)
    tasks = [{"seed": seed, "side": "xo"[seed % 2], "workflow_args": {"opponent": "minimax"}} for seed in range(60)]
    games = play(ttt.tictactoe, tasks, ttt.fallible_minimax)
    losses = sum(e.metrics["loss_rate"] for e in games)
    assert sum(e.metrics["win_rate"] for e in games) == 0 and 5 <= losses <= 50


def test_perfect_play_ties_every_group_against_minimax_but_few_against_fallible_minimax():
    """Why tic-tac-toe's league meets `fallible_minimax`, not `minimax`: once the policy plays perfectly, every group
    of 8 games against minimax is 8 draws (no reward variance, nothing to learn), against fallible_minimax few are."""
    tasks = [
        {"seed": group, "side": "xo"[group % 2], "workflow_args": {"opponent": "drawn"}}
        for group in range(16)
        for _ in range(8)
    ]
    tied_groups = {}
    for opponent in (ttt.minimax, ttt.fallible_minimax):
        games = play(
            ttt.tictactoe,
            tasks,
            ttt.minimax,
            auxiliary={"drawn": ScriptedChatModel.seeded(opponent, name="drawn", seed=1, baseline=False)},
        )
        assert all(e.error is None and e.metrics["loss_rate"] == 0.0 for e in games)
        wins = [e.metrics["win_rate"] for e in games]
        tied_groups[opponent.__name__] = sum(
            len(set(wins[start : start + 8])) == 1 for start in range(0, len(games), 8)
        )
    assert tied_groups["minimax"] == 16 and tied_groups["fallible_minimax"] <= 4


# --- twenty questions and werewolf ----------------------------------------------------------------


@pytest.mark.parametrize("candidates, max_questions", [(0, 20), (8, 6)])
def test_the_halving_asker_finds_every_word_with_a_truthful_answerer(candidates, max_questions):
    words = tq_rules.load_words("eval")
    tasks = [
        {"word": word, "seed": i, "workflow_args": {"candidates": candidates, "max_questions": max_questions}}
        for i, word in enumerate(words)
    ]
    answerer = ScriptedChatModel.seeded(tq.membership_answerer, name="truthful", baseline=False)
    episodes = play(tq.twenty_questions, tasks, tq.halving_asker, auxiliary={"answerer": answerer})
    pool = len(tq_rules.vocabulary()) if candidates == 0 else candidates
    assert all(e.error is None and e.metrics["success"] == 1.0 for e in episodes)
    assert max(e.metrics["questions"] for e in episodes) <= math.ceil(math.log2(pool)) + 1
    assert all(e.metrics["invalid_action_rate"] == 0.0 and e.metrics["wrong_guesses"] == 0.0 for e in episodes)


def test_the_halving_asker_recovers_from_unknown_and_wrong_answers():
    opening = [
        {"role": "system", "content": tq_rules.SYSTEM},
        {
            "role": "user",
            "content": tq_rules.RULES.format(max_questions=6) + tq_rules.CANDIDATES.format(words="cat, dog, pen, sun"),
        },
    ]
    first = tq.halving_asker(opening, random.Random(0))
    assert first == tq_baselines.HALVING_QUESTION.format(words="cat, dog")
    unknown = [
        *opening,
        {"role": "assistant", "content": first},
        {"role": "user", "content": "I don't know. 5 questions left."},
    ]
    assert tq.halving_asker(unknown, random.Random(0)) == tq_baselines.HALVING_QUESTION.format(words="pen, sun")
    lied = [*opening, {"role": "assistant", "content": first}, {"role": "user", "content": "Yes. 5 questions left."}]
    lied += [
        {"role": "assistant", "content": tq_baselines.HALVING_QUESTION.format(words="cat")},
        {"role": "user", "content": "No. 4 questions left."},
    ]
    lied += [{"role": "assistant", "content": "Is it a dog?"}, {"role": "user", "content": "No. 3 questions left."}]
    assert tq.halving_asker(lied, random.Random(0)) == tq_baselines.HALVING_QUESTION.format(
        words="cat"
    )  # every word ruled out: start again without dog
    final = [
        *opening,
        {"role": "assistant", "content": first},
        {"role": "user", "content": "No." + tq_rules.FINAL + tq_rules.FINAL_CHOICES.format(words="cat, dog, pen, sun")},
    ]
    assert tq.halving_asker(final, random.Random(0)) in ("pen", "sun")  # the final guess: a bare word still possible


@pytest.mark.parametrize("target", ["werewolf", "good_guy"])
def test_werewolf_random_valid_plays_whole_games_without_an_invalid_action(target):
    tasks = [{"seed": seed, "workflow_args": {"trainable_target": target, "max_rounds": 3}} for seed in range(20)]
    participant = ScriptedChatModel.seeded(ww.random_valid, name="participant", seed=1, baseline=False)
    episodes = play(ww.werewolf, tasks, ww.random_valid, auxiliary={"participant": participant})
    assert all(
        e.error is None and e.metrics["broken"] == 0.0 and e.metrics["invalid_action_rate"] == 0.0 for e in episodes
    )
    side = {"werewolf"} if target == "werewolf" else {"villager", "seer", "witch"}
    # Rewarded: the players of the side that made a call (as with a trained model; a villager killed on night 1 made
    # none).
    assert all(
        1 <= len(e.rewards) <= (2 if target == "werewolf" else 5) and {e.roles[a] for a in e.rewards} <= side
        for e in episodes
    )
    assert 0 < sum(e.metrics["trained_win"] for e in episodes) < len(episodes)


def test_coordinated_werewolves_name_the_same_good_player_and_win_more_than_random_ones():
    system = {
        "role": "system",
        "content": "You are Player3, a werewolf. Your fellow werewolf is Player1. Each night you choose a good player "
        "to kill.",
    }
    vote = {
        "role": "user",
        "content": "Player2: hi\nVote out a player. Reply with one name: Player1, Player2, Player4; or skip to "
        "abstain.",
    }
    assert ww.coordinated_werewolves([system, vote], random.Random(0)) == "Player2"  # never the mate
    kill = {"role": "user", "content": "Night 1. Who do you kill? Reply with one name: Player5, Player2, Player7."}
    assert ww.coordinated_werewolves([system, kill], random.Random(0)) == "Player2"
    tasks = [{"seed": seed, "workflow_args": {"trainable_target": "werewolf", "max_rounds": 2}} for seed in range(150)]
    participant = ScriptedChatModel.seeded(ww.random_valid, name="participant", seed=1, baseline=False)
    wins = {
        policy.__name__: sum(
            e.metrics["trained_win"] for e in play(ww.werewolf, tasks, policy, auxiliary={"participant": participant})
        )
        for policy in (ww.random_valid, ww.coordinated_werewolves)
    }
    assert wins["coordinated_werewolves"] > wins["random_valid"] + 15, wins


def test_episode_estimates_take_per_episode_values():
    episodes = play(
        gn.guess_number, [{"secret": s, "workflow_args": {"max_turns": 4}} for s in (8, 16)], gn.binary_search
    )
    found = estimates_of(episodes)
    assert found["workflow/success"] == Estimate(0.5, *wilson_interval(1, 2), 2, "wilson")
    assert found["reward/mean"].method == "bootstrap" and found["reward/mean"].n == 2
    assert found["agent/policy/reward"].mean == found["reward/mean"].mean


def test_the_example_held_out_games_give_the_baselines_their_known_values():
    config = load_game_config("guess_number")
    _, tasks = load_train_and_eval_tasks(config.train_dataset, config.eval_dataset)
    episodes = play(gn.guess_number, tasks, gn.binary_search)
    assert sum(e.metrics["success"] for e in episodes) == sum(task["secret"] != 16 for task in tasks)
