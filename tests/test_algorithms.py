"""Advantage estimators and episode assembly against hand-computed numbers (pure, no model)."""

import dataclasses
import math

import pytest
import torch

from sparring.algorithms import (
    ADVANTAGE_ESTIMATORS,
    apply_kl_penalty,
    assembly_metrics,
    build_datums,
    build_sampled_masks,
    compute_advantages,
    get_estimator,
    grpo,
    multi_step_grpo,
    reinforce,
    rloo,
)
from sparring.engine.learner import prepare_data
from sparring.rollout.types import Episode, Timeline
from sparring.types import Datum, ModelInput


def single_call_timeline(agent, model="policy"):
    return Timeline(agent=agent, model=model, tokens=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0, -0.5, -0.25])


def episode(group, rewards, roles=None, agents=None, error=None):
    """An episode where each agent (default: every rewarded one) has one single-call timeline."""
    agents = list(rewards) if agents is None else agents
    return Episode(
        task={},
        group=group,
        timelines=[single_call_timeline(agent) for agent in agents],
        rewards=rewards,
        roles=roles or {},
        error=error,
    )


# Prompt 1, completion 1, the second prompt's extension, completion 2: one merged timeline of two calls.
PROMPT_1, COMPLETION_1, PROMPT_2_EXTENSION, COMPLETION_2 = [10, 11, 12], [20, 21], [13, 14], [22, 23, 24]
MERGED_TOKENS = PROMPT_1 + COMPLETION_1 + PROMPT_2_EXTENSION + COMPLETION_2
MERGED_MASK = [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
MERGED_LOGPROBS = [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, -0.4, -0.5]


def merged_timeline(agent="solver", model="policy"):
    return Timeline(
        agent=agent, model=model, tokens=MERGED_TOKENS, loss_mask=MERGED_MASK, logprobs=MERGED_LOGPROBS, num_calls=2
    )


# --- estimators ---------------------------------------------------------------------------------


def test_grpo_normalized_and_centered():
    rewards_G = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    population_std = math.sqrt((1.5**2 + 0.5**2 + 0.5**2 + 1.5**2) / 4)
    expected = [d / (population_std + 1e-6) for d in (-1.5, -0.5, 0.5, 1.5)]
    assert grpo(rewards_G).tolist() == pytest.approx(expected)
    assert grpo(rewards_G, normalize_by_std=False).tolist() == pytest.approx([-1.5, -0.5, 0.5, 1.5])
    assert grpo(torch.tensor([3.0])).tolist() == [0.0]


def test_multi_step_grpo_has_grpo_statistics():
    rewards_G = torch.tensor([0.0, 1.0, 1.0, 5.0])
    assert torch.equal(multi_step_grpo(rewards_G), grpo(rewards_G))
    assert torch.equal(multi_step_grpo(rewards_G, normalize_by_std=False), grpo(rewards_G, normalize_by_std=False))


def test_rloo_leave_one_out():
    rewards_G = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    expected = [1 - (2 + 3 + 4) / 3, 2 - (1 + 3 + 4) / 3, 3 - (1 + 2 + 4) / 3, 4 - (1 + 2 + 3) / 3]
    assert rloo(rewards_G).tolist() == pytest.approx(expected)
    assert rloo(torch.tensor([7.0])).tolist() == [0.0]


def test_reinforce_is_identity():
    rewards_G = torch.tensor([0.5, -1.0, 2.0])
    assert reinforce(rewards_G).tolist() == rewards_G.tolist()


def test_registry_and_unknown_name():
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "multi_step_grpo", "rloo", "reinforce"}
    assert get_estimator("rloo") is rloo
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*grpo"):
        get_estimator("ppo")


# --- compute_advantages -------------------------------------------------------------------------


def test_groups_share_a_baseline_and_zero_variance_groups_drop():
    episodes = [episode(0, {"a": 1.0}), episode(0, {"a": 1.0}), episode(1, {"a": 0.0}), episode(1, {"a": 2.0})]
    result = compute_advantages(episodes, "grpo", normalize_by_std=False)
    assert result.advantages == {(2, "a"): -1.0, (3, "a"): 1.0}
    assert result.metrics["advantage/groups"] == 2
    assert result.metrics["advantage/dropped_groups"] == 1
    assert result.metrics["advantage/zero_variance_fraction"] == 0.5
    assert result.metrics["advantage/mean"] == 0.0
    assert result.metrics["advantage/std"] == 1.0

    kept = compute_advantages(episodes, "grpo", normalize_by_std=False, drop_zero_variance=False)
    assert kept.advantages == {(0, "a"): 0.0, (1, "a"): 0.0, (2, "a"): -1.0, (3, "a"): 1.0}
    assert kept.metrics["advantage/dropped_groups"] == 0
    assert kept.metrics["advantage/zero_variance_fraction"] == 0.5


def test_per_role_groups_get_separate_baselines():
    roles = {"wolf": "werewolf", "villager": "villager"}
    episodes = [episode(0, {"wolf": 1.0, "villager": 10.0}, roles), episode(0, {"wolf": 3.0, "villager": 20.0}, roles)]
    per_role = compute_advantages(episodes, "grpo", normalize_by_std=False)
    assert per_role.advantages == {(0, "wolf"): -1.0, (1, "wolf"): 1.0, (0, "villager"): -5.0, (1, "villager"): 5.0}
    assert per_role.metrics["advantage/groups"] == 2

    pooled = compute_advantages(episodes, "grpo", normalize_by_std=False, per_role=False)
    assert pooled.advantages == {(0, "wolf"): -7.5, (1, "wolf"): -5.5, (0, "villager"): 1.5, (1, "villager"): 11.5}


def test_a_baseline_group_splits_its_task_group():
    # One task, two opponents: the games against "strong" are compared with each other, not with the wins against
    # "weak".
    games = [
        ("strong", -1.0),
        ("strong", 0.0),
        ("weak", 1.0),
        ("weak", 1.0),
        ("strong", -1.0),
        (None, 0.5),
        (None, 1.5),
    ]
    episodes = [dataclasses.replace(episode(0, {"a": reward}), baseline_group=opponent) for opponent, reward in games]
    result = compute_advantages(episodes, "grpo", normalize_by_std=False)
    assert result.advantages == pytest.approx(
        {(0, "a"): -1 / 3, (1, "a"): 2 / 3, (4, "a"): -1 / 3, (5, "a"): -0.5, (6, "a"): 0.5}
    )
    assert (
        result.metrics["advantage/groups"] == 3 and result.metrics["advantage/dropped_groups"] == 1
    )  # "weak": both won
    pooled = compute_advantages(
        [dataclasses.replace(e, baseline_group=None) for e in episodes], "grpo", normalize_by_std=False
    )
    assert pooled.metrics["advantage/groups"] == 1 and pooled.advantages[(2, "a")] > 0


def test_self_play_players_of_one_role_share_a_group():
    roles = {"white": "player", "black": "player"}
    result = compute_advantages([episode(0, {"white": 1.0, "black": 0.0}, roles)], "rloo")
    assert result.advantages == {(0, "white"): 1.0, (0, "black"): -1.0}


def test_agents_without_reward_raise_and_without_timelines_are_skipped():
    with pytest.raises(ValueError, match=r"episode 1 .*'critic'"):
        compute_advantages([episode(0, {"critic": 1.0}), episode(0, {"solver": 1.0}, agents=["critic"])], "grpo")
    result = compute_advantages(
        [episode(0, {"a": 0.0, "idle": 5.0}, agents=["a"]), episode(0, {"a": 1.0})], "reinforce"
    )
    assert result.advantages == {(0, "a"): 0.0, (1, "a"): 1.0}


def test_errored_episode_participates_with_its_penalty_reward():
    episodes = [episode(0, {"a": 1.0}), episode(0, {"a": -1.0}, error="TimeoutError: episode exceeded 60 s")]
    result = compute_advantages(episodes, "grpo", normalize_by_std=False)
    assert result.advantages == {(0, "a"): 1.0, (1, "a"): -1.0}


def turn_episode(group, reward, turn_rewards, error=None):
    """An episode whose agent 'guesser' made one merged call per turn reward (two at most here)."""
    calls = len(turn_rewards) if turn_rewards else 2
    call_index = [-1, -1, -1, 0, 0, -1, -1, 1, 1, 1] if calls == 2 else [-1, -1, -1, 0, 0]
    timeline = Timeline(
        agent="guesser",
        model="policy",
        tokens=MERGED_TOKENS[: len(call_index)],
        loss_mask=MERGED_MASK[: len(call_index)],
        logprobs=MERGED_LOGPROBS[: len(call_index)],
        num_calls=calls,
        call_index=call_index,
    )
    return Episode(
        task={},
        group=group,
        timelines=[timeline],
        rewards={"guesser": reward},
        turn_rewards={"guesser": turn_rewards} if turn_rewards else {},
        error=error,
    )


def test_per_turn_credit_baselines_each_turn_index_on_its_return():
    # Returns: episode 0 -> [1+0.5+0.25, 1+0.25] = [1.75, 1.25]; episode 1 -> [0+0+0.25, 0+0.25] = [0.25, 0.25];
    # episode 2 errored (no turn rewards) -> [-0.1, -0.1]. Turn 0 mean 0.6333, turn 1 mean 0.4667.
    episodes = [
        turn_episode(0, 1.0, [0.5, 0.25]),
        turn_episode(0, 0.0, [0.0, 0.25]),
        turn_episode(0, -0.1, None, error="boom"),
    ]
    result = compute_advantages(episodes, "multi_step_grpo", normalize_by_std=False)
    assert result.advantages[(0, "guesser")] == pytest.approx([1.75 - 1.9 / 3, 1.25 - 1.4 / 3])
    assert result.advantages[(1, "guesser")] == pytest.approx([0.25 - 1.9 / 3, 0.25 - 1.4 / 3])
    assert result.advantages[(2, "guesser")] == pytest.approx([-0.1 - 1.9 / 3, -0.1 - 1.4 / 3])
    assert result.metrics["advantage/groups"] == 2.0


@pytest.mark.parametrize("discount", [0.0, 0.5])
def test_a_turn_reward_discount_weights_later_turn_rewards_in_a_calls_return(discount):
    # Returns: episode 0 -> [1 + 0.5 + d * 0.25, 1 + 0.25]; episode 1 -> [0 + 0 + d * 0.75, 0 + 0.75].
    episodes = [turn_episode(0, 1.0, [0.5, 0.25]), turn_episode(0, 0.0, [0.0, 0.75])]
    result = compute_advantages(episodes, "multi_step_grpo", normalize_by_std=False, turn_reward_discount=discount)
    first = (1.5 - 0.5 * discount) / 2  # half the turn-0 gap: 0.75 undiscounted later rewards ignored, 0.625 at d = 0.5
    assert result.advantages[(0, "guesser")] == pytest.approx([first, 0.25])
    assert result.advantages[(1, "guesser")] == pytest.approx([-first, -0.25])


def test_per_turn_credit_drops_only_the_turns_without_signal_and_lands_on_each_calls_span():
    # Turn 1 returns are equal (0.25 and 0.25): that turn is dropped (advantage 0), turn 0 keeps its signal.
    episodes = [turn_episode(0, 0.0, [0.5, 0.25]), turn_episode(0, 0.0, [0.0, 0.25])]
    result = compute_advantages(episodes, "multi_step_grpo", normalize_by_std=False)
    assert result.advantages == {(0, "guesser"): [0.25, 0.0], (1, "guesser"): [-0.25, 0.0]}
    assert result.metrics["advantage/dropped_groups"] == 1.0
    datums = build_datums(episodes, {(0, "guesser"): [0.25, -0.5]})
    # Positions 2, 3 predict call 0's tokens; 6, 7, 8 predict call 1's.
    assert datums["policy"][0].loss_fn_inputs["advantages"].tolist() == [0, 0, 0.25, 0.25, 0, 0, -0.5, -0.5, -0.5]


def test_per_turn_credit_needs_call_indices():
    bare = Episode(task={}, group=0, timelines=[merged_timeline("guesser")], rewards={"guesser": 1.0})
    with pytest.raises(ValueError, match="without call_index"):
        compute_advantages([bare, turn_episode(0, 0.0, [0.5, 0.25])], "grpo")


# --- build_datums -------------------------------------------------------------------------------


def test_merged_timeline_gives_one_datum_trained_on_completion_targets():
    merged = Episode(task={}, group=0, timelines=[merged_timeline()], rewards={"solver": 1.0})
    datums = build_datums([merged], {(0, "solver"): 0.5})
    assert list(datums) == ["policy"]
    [datum] = datums["policy"]
    assert datum.model_input.to_ints() == MERGED_TOKENS[:-1]
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    advantages = datum.loss_fn_inputs["advantages"].tolist()
    logprobs = datum.loss_fn_inputs["logprobs"].tolist()
    assert targets == MERGED_TOKENS[1:]
    assert len(targets) == len(advantages) == len(logprobs) == datum.model_input.length == 9
    # Position i predicts token i+1: positions 2, 3 predict completion 1; 6, 7, 8 predict completion 2.
    trained_positions = [i for i, a in enumerate(advantages) if a != 0]
    assert trained_positions == [2, 3, 6, 7, 8]
    assert [targets[i] for i in trained_positions] == COMPLETION_1 + COMPLETION_2
    assert all(advantages[i] == 0.5 for i in trained_positions)
    assert [logprobs[i] for i in trained_positions] == pytest.approx([-0.1, -0.2, -0.3, -0.4, -0.5])
    assert build_sampled_masks([merged], {(0, "solver"): 0.5}) == {"policy": [MERGED_MASK[1:]]}


def test_datums_are_keyed_by_model_and_skip_untrained_timelines():
    prompt_only = Timeline(agent="solver", model="solver-lora", tokens=[1, 2], loss_mask=[0, 0], logprobs=[0.0, 0.0])
    first = Episode(
        task={},
        group=0,
        timelines=[
            merged_timeline("solver", "solver-lora"),
            prompt_only,
            single_call_timeline("critic", "critic-lora"),
        ],
        rewards={"solver": 1.0, "critic": 0.0},
    )
    second = Episode(
        task={}, group=0, timelines=[single_call_timeline("critic", "critic-lora")], rewards={"critic": 1.0}
    )
    advantages = {(0, "solver"): 1.0, (0, "critic"): -1.0}  # (1, "critic") was dropped
    datums = build_datums([first, second], advantages)
    assert sorted(datums) == ["critic-lora", "solver-lora"]
    assert len(datums["solver-lora"]) == 1 and len(datums["critic-lora"]) == 1
    assert datums["critic-lora"][0].loss_fn_inputs["advantages"].tolist() == [-1.0, -1.0]
    masks = build_sampled_masks([first, second], advantages)
    assert {model: len(m) for model, m in masks.items()} == {model: len(d) for model, d in datums.items()}
    for model_datums in datums.values():
        assert len(prepare_data(model_datums, "ppo", vocab_size=100)) == len(model_datums)


def test_misaligned_timeline_is_named():
    broken = Timeline(agent="solver", model="policy", tokens=[1, 2, 3], loss_mask=[0, 1], logprobs=[0.0, -0.1, -0.2])
    with pytest.raises(ValueError, match=r"episode 0, agent 'solver', timeline 0"):
        build_datums([Episode(task={}, group=0, timelines=[broken], rewards={"solver": 1.0})], {(0, "solver"): 1.0})


# --- KL penalty ---------------------------------------------------------------------------------


def test_apply_kl_penalty_numbers():
    datums = [
        Datum(
            ModelInput.from_ints([5, 6, 7]),
            {"target_tokens": [6, 7, 8], "logprobs": [0.0, -0.5, -1.0], "advantages": [0.0, 2.0, 2.0]},
        ),
        # A sampled token whose advantage is exactly zero is still penalized.
        Datum(ModelInput.from_ints([5]), {"target_tokens": [6], "logprobs": [-0.2], "advantages": [0.0]}),
    ]
    base_logprobs = [[-3.0, -1.0, -0.8], [-0.7]]
    penalized, metrics = apply_kl_penalty(datums, base_logprobs, [[0, 1, 1], [1]], kl_coef=0.1)
    assert penalized[0].loss_fn_inputs["advantages"].tolist() == pytest.approx([0.0, 2.0 - 0.1 * 0.5, 2.0 - 0.1 * -0.2])
    assert penalized[1].loss_fn_inputs["advantages"].tolist() == pytest.approx([-0.1 * 0.5])
    assert metrics["kl/policy_base"] == pytest.approx((0.5 - 0.2 + 0.5) / 3)
    assert penalized[0].loss_fn_inputs["target_tokens"].tolist() == [6, 7, 8]
    assert datums[0].loss_fn_inputs["advantages"].tolist() == [0.0, 2.0, 2.0]  # inputs untouched

    # A constrained target (allowed_counts > 0) is renormalised over its allowed set: no penalty against the base.
    constrained = Datum(
        ModelInput.from_ints([5, 6, 7]),
        {
            "target_tokens": [6, 7, 8],
            "logprobs": [0.0, -0.5, -0.1],
            "advantages": [0.0, 2.0, 2.0],
            "allowed_counts": [0, 0, 2],
            "allowed_tokens": [8, 9],
        },
    )
    penalized, metrics = apply_kl_penalty([constrained], [[-3.0, -1.0, -4.0]], [[0, 1, 1]], kl_coef=0.1)
    assert penalized[0].loss_fn_inputs["advantages"].tolist() == pytest.approx([0.0, 2.0 - 0.1 * 0.5, 2.0])
    assert metrics == pytest.approx({"kl/policy_base": 0.5, "kl/constrained_share": 0.5})

    with pytest.raises(ValueError, match="datum 1 has 1 targets but 2 base logprobs"):
        apply_kl_penalty(datums, [[-3.0, -1.0, -0.8], [-0.7, -0.1]], [[0, 1, 1], [1]], kl_coef=0.1)
    with pytest.raises(ValueError, match="aligned one to one"):
        apply_kl_penalty(datums, base_logprobs[:1], [[0, 1, 1], [1]], kl_coef=0.1)


# --- metrics ------------------------------------------------------------------------------------


def test_assembly_metrics_count_merging_and_training():
    episodes = [
        Episode(
            task={},
            group=0,
            timelines=[merged_timeline(), single_call_timeline("critic")],
            rewards={"solver": 1.0, "critic": 1.0},
        )
    ]
    datums = build_datums(episodes, {(0, "solver"): 1.0, (0, "critic"): 1.0})
    metrics = assembly_metrics(episodes, datums)
    assert metrics["tokens/sampled"] == 5 + 2
    assert metrics["tokens/trained"] == 5 + 2
    assert metrics["tokens/total"] == 9 + 2
    assert metrics["timeline/num"] == 2
    assert metrics["timeline/calls"] == 3
    assert metrics["timeline/merge_rate"] == pytest.approx(1 - 2 / 3)
    # Per call: (prompt 1 + completion 1) + (whole merged sequence) for the solver, 3 for the critic.
    assert metrics["tokens/per_call_equivalent"] == 5 + 10 + 3
    assert metrics["tokens/saved_by_merging"] == 5
    assert assembly_metrics([], {})["timeline/merge_rate"] == 0.0
