"""Exploration that keeps the learner exact, and the trainer's response to collapse.

Training rollouts may draw constrained tokens from (1 - e) * policy + e * uniform over the allowed tokens; the
sampler records both logprobs, a timeline sums log p - log q, and the update weights each episode by p / q. On
the tiny model: the recorded behaviour logprob is the mix's; with no exploration nothing changes; on a bandit
drawn with exploration the weighted estimate matches the policy's known gradient, and the unweighted one does not.
"""

import json
import math

import pytest
import torch

from sparring import (
    AlgorithmConfig,
    DatasetConfig,
    LoggingConfig,
    ServiceClient,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)
from sparring.algorithms import CollapseResponse, compute_advantages, importance_weights, weight_advantages
from sparring.rollout import Episode
from sparring.rollout.timelines import merge_calls
from sparring.rollout.types import ModelCall
from sparring.types import ModelInput, OutputConstraint, SamplingParams

LETTERS = ["A", "B", "C", "D"]


@pytest.fixture(scope="module")
def tiny_sampler(tiny_model_dir, tmp_path_factory):
    service = ServiceClient(base_dir=tmp_path_factory.mktemp("exploration"))
    client = service.create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    return client.save_weights_and_get_sampling_client(kind="inflight"), client.get_tokenizer()


def draw(sampler, tokenizer, count: int, exploration: float, choices=LETTERS, temperature: float = 1.0):
    prompt = tokenizer.encode("Pick a letter:")
    constraint = OutputConstraint(choices=choices) if choices else None
    params = SamplingParams(
        constraint=constraint, exploration=exploration, temperature=temperature, seed=3, max_tokens=4
    )
    return prompt, sampler.sample(ModelInput.from_ints(prompt), count, params).result().sequences


def test_an_exploring_draw_records_the_mix_it_was_drawn_from_beside_the_models_own_logprob(tiny_sampler):
    sampler, tokenizer = tiny_sampler
    _, sequences = draw(sampler, tokenizer, 64, exploration=0.4)
    for sequence in sequences:
        mixed = 0.6 * math.exp(sequence.logprobs[0]) + 0.4 / len(LETTERS)  # four single-token letters allowed first
        assert math.exp(sequence.behaviour_logprobs[0]) == pytest.approx(mixed, rel=1e-4)
    assert {sequence.tokens[0] for sequence in sequences} == {
        tokenizer.encode(letter, add_special_tokens=False)[0] for letter in LETTERS
    }
    # Drawn from the model's own distribution: no behaviour logprobs, so no weight; free text never explores.
    assert all(sequence.behaviour_logprobs is None for sequence in draw(sampler, tokenizer, 8, exploration=0.0)[1])
    assert all(
        sequence.behaviour_logprobs is None
        for sequence in draw(sampler, tokenizer, 8, exploration=0.4, choices=None)[1]
    )


def bandit_episodes(prompt, sequences, paid: int | None = None) -> list[Episode]:
    """One episode per draw, its timeline merged from the recorded call, rewarded 1 when it drew the token `paid`."""
    episodes = []
    for sequence in sequences:
        call = ModelCall(
            "p", "policy", prompt, sequence.tokens, sequence.logprobs, [], list(sequence.behaviour_logprobs or [])
        )
        reward = float(sequence.tokens[0] == paid)
        episodes.append(Episode(task={}, group=0, timelines=merge_calls([call]), rewards={"p": reward}))
    return episodes


def logit_gradient(episodes, advantages, tokens: list[int], probabilities: torch.Tensor) -> torch.Tensor:
    """The update's direction in the first token's logits: the mean of A_i * grad log p(a_i) = A_i * (onehot - p)."""
    gradient = torch.zeros(len(tokens), dtype=torch.float64)
    for index, episode in enumerate(episodes):
        onehot = torch.tensor(
            [float(episode.timelines[0].tokens[-2] == token) for token in tokens], dtype=torch.float64
        )
        gradient += advantages[(index, "p")] * (onehot - probabilities)
    return gradient / len(episodes)


def test_on_a_bandit_drawn_with_exploration_the_weighted_update_is_the_policys_own_gradient(tiny_sampler):
    sampler, tokenizer = tiny_sampler
    tokens = [tokenizer.encode(letter, add_special_tokens=False)[0] for letter in LETTERS]
    prompt, sequences = draw(sampler, tokenizer, 6000, exploration=0.5)
    policy = {sequence.tokens[0]: math.exp(sequence.logprobs[0]) for sequence in sequences}
    probabilities = torch.tensor([policy[token] for token in tokens], dtype=torch.float64)
    rarest = int(probabilities.argmin())  # paying the policy's rarest letter: exploration draws it far more often
    assert probabilities[rarest] < 0.15
    rewards = torch.nn.functional.one_hot(torch.tensor(rarest), len(tokens)).double()
    exact = probabilities * (rewards - probabilities[rarest])  # d E_p[r] / d logits

    episodes = bandit_episodes(prompt, sequences, paid=tokens[rarest])
    # rloo: each draw's baseline is the others' mean, independent of the draw, so weighting keeps it unbiased.
    advantages = compute_advantages(episodes, "rloo", drop_zero_variance=False).advantages
    weights, metrics = importance_weights(episodes, cap=10.0)
    assert metrics["exploration/truncated_share"] == 0.0 and metrics["exploration/weight_max"] <= 2.0  # <= 1 / (1 - e)
    corrected = logit_gradient(episodes, weight_advantages(advantages, weights), tokens, probabilities)
    uncorrected = logit_gradient(episodes, advantages, tokens, probabilities)
    error = lambda estimate: ((estimate - exact).norm() / exact.norm()).item()  # noqa: E731
    assert error(corrected) < 0.2, (corrected, exact)
    assert error(uncorrected) > 1.0, (uncorrected, exact)  # the old behaviour: the mix's gradient, not the policy's


def test_drawn_from_the_policy_itself_every_weight_is_one_and_the_advantages_are_untouched(tiny_sampler):
    sampler, tokenizer = tiny_sampler
    prompt, sequences = draw(sampler, tokenizer, 16, exploration=0.0)
    episodes = bandit_episodes(prompt, sequences)
    assert all(timeline.log_importance_weight == 0.0 for episode in episodes for timeline in episode.timelines)
    assert importance_weights(episodes, cap=10.0) == ([1.0] * 16, {})


def test_the_collapse_response_widens_exploration_after_tied_steps_and_narrows_it_back():
    response = CollapseResponse(base=0.05, bound=0.5, patience=2, factor=2.0, step_up=0.1, high=0.5, exploration=0.05)
    assert [response.step(tied) for tied in [0.8, 0.9, 1.0, 1.0, 1.0, 0.2, 0.1, None, 0.1, 0.1]] == pytest.approx(
        [0.05, 0.1, 0.2, 0.4, 0.5, 0.25, 0.125, 0.125, 0.0625, 0.05]
    )


async def always_tied(task, model, auxiliary_models):
    await model([{"role": "user", "content": "Pick a letter:"}], choices=LETTERS)
    return WorkflowOutput(reward=1.0)


def test_a_run_whose_groups_keep_tying_raises_its_exploration_and_corrects_for_it(tiny_model_dir, tmp_path):
    tune(
        workflow_func=always_tied,
        train_dataset=DatasetConfig(tasks=[{"n": i} for i in range(2)], total_steps=4),
        model=TunerModelConfig(model_path=str(tiny_model_dir), lora_rank=2),
        algorithm=AlgorithmConfig(group_size=4, batch_size=2, exploration=0.0, allow_nothing_trained=True),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    steps = [
        json.loads(line)
        for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        if '"collapse/exploration"' in line
    ]
    assert [record["collapse/exploration"] for record in steps] == pytest.approx([0.0, 0.1, 0.2, 0.4])
    assert "exploration/weight_mean" not in steps[0] and "exploration/weight_mean" in steps[2]  # step 3 drew with 0.1
