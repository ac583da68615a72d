"""Constrained actions through the chat model, the timelines and the RL loop, on the tiny model.

The toy game: an agent names a colour with `choices=`, then (same conversation, so one merged timeline) says a
word freely. The reward is 1 when it named the target colour — the least likely of the four under the base model.
The run must (a) sample only valid colours, (b) start with the learner's logprobs equal to the sampler's on every
trained token at every step (`train/sampler_logprob_gap`, constrained tokens included; the loop is on-policy) and
(c) learn the target. A learner that
ignores the recorded allowed sets fails (b) at once (its logprobs miss the renormalisation) and, under PPO, (c):
its importance ratio is the base model's mass on the allowed tokens, far below the clip range, so the updates
vanish.
"""

import asyncio
import json
import math

import pytest

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerHandle,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)
from sparring.algorithms import build_datums
from sparring.engine.allowed_tokens import is_allowed
from sparring.logging.report import render_report
from sparring.rollout import FrozenChatModel, PolicyChatModel, RunnerSettings, as_episode_fn, run_episodes
from sparring.types import ModelInput, OutputConstraint, SamplingParams

COLOURS = ["red", "green", "blue", "yellow"]
PROMPT = [{"role": "user", "content": "Name a colour."}]
STEPS = 12


async def name_a_colour(task, model, auxiliary_models):
    reply = await model(PROMPT, choices=COLOURS)
    if reply.content not in COLOURS:
        raise AssertionError(f"constrained reply {reply.content!r} is not one of {COLOURS}")
    await model([*PROMPT, reply.message, {"role": "user", "content": "Now say anything."}], max_tokens=3)
    return WorkflowOutput(reward=float(reply.content == task["target"]))


def base_choice_probabilities(tiny_model_dir, tmp_path) -> dict[str, float]:
    """The colours' probabilities under the base model's constrained distribution, read off 64 constrained samples
    (each records its own log-probability); colours never drawn are left out."""
    sampler = ServiceClient(base_dir=tmp_path).create_sampling_client(base_model=str(tiny_model_dir))
    prompt = ModelInput.from_ints(sampler.get_renderer().render(PROMPT))
    sequences = (
        sampler.sample(prompt, 64, SamplingParams(seed=0, constraint=OutputConstraint(choices=COLOURS)))
        .result()
        .sequences
    )
    renderer = sampler.get_renderer()
    return {
        renderer.parse_response(s.tokens, tool_calls=False)["content"]: math.exp(sum(s.logprobs)) for s in sequences
    }


def test_a_toy_game_with_choices_learns_with_the_learner_exact_on_constrained_tokens(tiny_model_dir, tmp_path):
    probabilities = base_choice_probabilities(tiny_model_dir, tmp_path / "probe")
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=0.05), (
        f"the drawn colours should hold nearly all the mass: {probabilities}"
    )
    target = min(
        probabilities, key=lambda colour: abs(probabilities[colour] - 0.2)
    )  # a group of 8 then often holds a rewarded episode
    result = tune(
        workflow_func=name_a_colour,
        train_dataset=DatasetConfig(tasks=[{"target": target}], total_steps=STEPS, seed=0),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=8, lora_rank=4),
        algorithm=AlgorithmConfig(algorithm_type="grpo", group_size=8, batch_size=2, learning_rate=2e-3, seed=0),
        runner=RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=0),
        run_dir=tmp_path / "run",
        logging=LoggingConfig(console=False, tensorboard=False, save_rollouts=True),
    )
    curve = [round(m["reward/mean"], 3) for m in result.history]
    gaps = [m["train/sampler_logprob_gap"] for m in result.history if "train/sampler_logprob_gap" in m]
    story = f"target {target} (base probabilities {probabilities}); reward per step {curve}; logprob gaps {gaps}"
    assert all(m.get("workflow/error_kind/exception", 0.0) == 0.0 for m in result.history), story
    assert gaps and max(gaps) < 1e-4, (
        f"every step trains the weights that sampled: learner and sampler logprobs must agree; {story}"
    )
    assert curve[0] <= 0.45, f"the base model should rarely name the target; {story}"
    assert sum(curve[-3:]) / 3 >= 0.8, f"the policy did not learn to name the target; {story}"
    rows = [
        json.loads(line)
        for path in (tmp_path / "run" / "rollouts").glob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    timelines = [row for row in rows if "tokens" in row]
    assert timelines and all(row["constrained"].count(len(COLOURS)) == 1 for row in timelines), (
        "each timeline's first choice allows the four colours' first tokens"
    )
    assert all(
        count == 0 or mask
        for row in timelines
        for count, mask in zip(row["constrained"], row["loss_mask"], strict=True)
    )
    assert '"constrained":[0,' in render_report(tmp_path / "run"), "`sparring view` carries the constrained positions"


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    service = ServiceClient(base_dir=tmp_path_factory.mktemp("ckpt"))
    client = service.create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    policy = PolicyChatModel(client.save_weights_and_get_sampling_client(kind="inflight"), defaults={"max_tokens": 8})
    frozen = FrozenChatModel(
        service.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 8}, agent="answerer"
    )
    return client, policy, frozen


def test_constrained_calls_merge_into_one_timeline_that_trains_exactly(models):
    client, policy, frozen = models

    async def two_turns(task, model, auxiliary_models):
        answer = await auxiliary_models["answerer"]([{"role": "user", "content": "Is it red?"}], choices=["Yes", "No"])
        assert answer.content in ("Yes", "No") and answer.tokens  # a frozen model constrains too
        first = await model(PROMPT, choices=COLOURS)
        history = [*PROMPT, first.message, {"role": "user", "content": f"{answer.content}. Again, as JSON."}]
        second = await model(
            history,
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "pick",
                    "schema": {"type": "object", "properties": {"colour": {"enum": COLOURS}}, "required": ["colour"]},
                },
            },
        )
        history += [second.message, {"role": "user", "content": "Free words now."}]
        await model(history)
        return WorkflowOutput(reward=1.0)

    def tuner():
        return TunerHandle(policies={"policy": policy}, auxiliary_models={"answerer": frozen})

    episodes = asyncio.run(
        run_episodes(as_episode_fn(two_turns), [{"task_id": "0"}], tuner, RunnerSettings(group_size=2))
    )
    for episode in episodes:
        assert episode.error is None, episode.error
        (timeline,) = episode.timelines
        assert timeline.num_calls == 3 and len(timeline.allowed_tokens) == len(timeline.tokens)
        constrained = [i for i, allowed in enumerate(timeline.allowed_tokens) if allowed]
        assert constrained and all(timeline.loss_mask[i] for i in constrained)
        assert all(is_allowed(timeline.allowed_tokens[i], timeline.tokens[i]) for i in constrained)
        assert any(
            mask and not allowed for mask, allowed in zip(timeline.loss_mask, timeline.allowed_tokens, strict=True)
        ), "the free-text turn is unconstrained"
    (datums,) = build_datums(episodes, {(0, "policy"): 1.0, (1, "policy"): -1.0}).values()
    output = client.forward(datums, "ppo").result()
    for datum, record in zip(datums, output.loss_fn_outputs, strict=True):
        trained = datum.loss_fn_inputs["advantages"].to_torch() != 0
        sampled = datum.loss_fn_inputs["logprobs"].to_torch()[trained]
        assert record["logprobs"].to_torch()[trained].tolist() == pytest.approx(sampled.tolist(), abs=1e-5)


def test_a_constrained_forced_tool_call_is_refused(models):
    _, policy, _ = models
    tools = [{"type": "function", "function": {"name": "vote", "parameters": {"type": "object"}}}]
    with pytest.raises(ValueError, match="cannot also be a forced tool call"):
        asyncio.run(policy(PROMPT, tools, tool_choice="required", choices=COLOURS))
