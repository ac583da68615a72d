"""RL learns: on a toy task with a known optimum, tune() takes the tiny model from chance to the optimum.

The task: reply to a prompt; the reward is 1 when the first sampled token is
in a small target set, 0 otherwise. The set is chosen from the base model's
own first-token distribution (the tokens just below its five favourites,
~9 % of the mass), so the run starts near chance and a group of 8 often
holds a rewarded episode. The optimum, reward 1, puts all mass on the set. The run goes through the same path a user
takes (workflow function, in-memory tasks, TunerModelConfig on a model directory, GRPO), and the test
checks both the logged per-step reward and, independently of the engine, the
trained PEFT adapter's probability of the target set under plain
transformers + peft. Broken advantages, loss sign, loss masks or optimizer
steps leave the reward at chance (or drive it to 0), and this test fails.
"""

import peft
import torch
from transformers import AutoModelForCausalLM

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    LoggingConfig,
    RunnerConfig,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)

PROMPTS = ["Pick a token.", "Say something.", "topic 1", "What comes next?"]
TARGET_MASS = 0.08
"""The target set grows, token by token, until the base model gives it at least this much mass on average."""
SKIPPED_FAVOURITES = 5
"""The base model's most likely tokens are left out of the set, so learning must move mass, not just sharpen."""
STEPS = 20
"""About twice what the run needs: with these settings seeds 0-6 all pass 0.8 by step 9."""
QUIET = LoggingConfig(console=False, tensorboard=False, save_rollouts=False)


def messages(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]


async def first_token_in_targets(task, model, auxiliary_models):
    said = await model(messages(task["prompt"]))
    return WorkflowOutput(reward=float(bool(said.tokens) and said.tokens[0] in task["targets"]))


def first_token_probs(model, renderer, prompts: list[str]) -> torch.Tensor:
    """P(first reply token) for each prompt, shape [P, V], from a plain forward pass."""
    rows = []
    with torch.no_grad():
        for prompt in prompts:
            tokens = renderer.render(messages(prompt))
            rows.append(model(input_ids=torch.tensor([tokens])).logits[0, -1].float().softmax(-1))
    return torch.stack(rows)


def choose_targets(probs_P_V: torch.Tensor) -> list[int]:
    """Tokens by falling mean probability, past the favourites, until they hold TARGET_MASS."""
    mean_V = probs_P_V.mean(0)
    order = mean_V.argsort(descending=True)[SKIPPED_FAVOURITES:]
    count = int((mean_V[order].cumsum(0) < TARGET_MASS).sum()) + 1
    return order[:count].tolist()


def test_grpo_learns_a_toy_task_from_chance_to_the_optimum(tiny_model_dir, tiny_loaded, tmp_path):
    base_probs_P_V = first_token_probs(tiny_loaded.model, tiny_loaded.renderer, PROMPTS)
    targets = choose_targets(base_probs_P_V)
    chance = base_probs_P_V[:, targets].sum(-1).mean().item()
    assert 0.05 <= chance <= 0.15, (
        f"target set {targets} has base mass {chance:.3f}; the task is meant to start near 10 %"
    )

    result = tune(
        workflow_func=first_token_in_targets,
        train_dataset=DatasetConfig(
            tasks=[{"prompt": p, "targets": targets} for p in PROMPTS], total_steps=STEPS, seed=0
        ),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=1, lora_rank=4),
        algorithm=AlgorithmConfig(algorithm_type="grpo", group_size=8, batch_size=4, learning_rate=1e-3, seed=0),
        runner=RunnerConfig(episode_timeout_s=60),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=0),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )

    curve = [round(m["reward/mean"], 3) for m in result.history]
    story = f"chance {chance:.3f}, targets {targets}; reward per step {curve}"
    assert result.steps == STEPS and len(curve) == STEPS, story
    assert curve[0] <= 0.3, f"the first step (base model) should score near chance; {story}"
    assert sum(curve[-3:]) / 3 >= 0.8, f"the policy did not learn the task; {story}"

    # Independently of the engine: the saved adapter under transformers + peft puts its mass on the targets.
    (adapter_dir,) = result.sampler_paths.values()
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    trained = peft.PeftModel.from_pretrained(fresh, adapter_dir).eval()
    trained_mass_P = first_token_probs(trained, tiny_loaded.renderer, PROMPTS)[:, targets].sum(-1)
    assert trained_mass_P.min().item() >= 0.8, f"trained target mass per prompt {trained_mass_P.tolist()}; {story}"
