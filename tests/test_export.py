"""Adapters that load anywhere: a trained adapter loads with `AutoPeftModelForCausalLM.from_pretrained(dir)` alone and
scores the sampler's tokens as the sampler did; `sparring export` writes it (or a merged model transformers loads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import AutoPeftModelForCausalLM
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    EvaluationConfig,
    LoggingConfig,
    ServiceClient,
    TunerModelConfig,
    WorkflowOutput,
    tune,
    types,
)
from sparring.cli import app

runner = CliRunner()
# peft, asked by this test to wrap a model, reads a property transformers 5 deprecates (sparring's own calls avoid it).
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


async def say_something(task, model, auxiliary_models):
    said = await model([{"role": "user", "content": task["topic"]}])
    return WorkflowOutput(reward=float(said.tokens[0] % 2))


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """A 2-step tiny run with a large learning rate, so the adapter is far from zero."""
    run_dir = tmp_path_factory.mktemp("export") / "run"
    result = tune(
        workflow_func=say_something,
        train_dataset=DatasetConfig(tasks=[{"topic": f"topic {i}"} for i in range(4)], total_steps=2),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4),
        algorithm=AlgorithmConfig(group_size=4, batch_size=2, learning_rate=5e-2, drop_zero_variance_groups=False),
        evaluation=EvaluationConfig(interval_steps=0),
        checkpoints=CheckpointsConfig(interval_steps=0),
        run_dir=run_dir,
        logging=LoggingConfig(console=False, tensorboard=False),
    )
    (adapter,) = result.sampler_paths.values()
    return run_dir, adapter


def sampled_by_the_sampler(adapter: str, tiny_model_dir) -> tuple[list[int], list[int], list[float]]:
    """A prompt, the tokens the sampler drew from the adapter after it, and the sampler's logprob of each."""
    sampler = ServiceClient().create_sampling_client(model_path=adapter)
    prompt = sampler.get_renderer().render([{"role": "user", "content": "topic 7"}])
    (sequence,) = (
        sampler.sample(types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=8, seed=3))
        .result()
        .sequences
    )
    return prompt, sequence.tokens, sequence.logprobs


def scored(model, prompt: list[int], completion: list[int]) -> list[float]:
    """Logprob of each completion token under ``model`` (teacher-forced)."""
    tokens = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()
    logprobs = torch.log_softmax(logits[0, :-1], dim=-1).gather(1, tokens[0, 1:, None])[:, 0]
    return logprobs[len(prompt) - 1 :].tolist()


def test_a_saved_adapter_names_a_loadable_base_and_says_it_is_a_causal_lm(trained, tiny_model_dir):
    _, adapter = trained
    config = json.loads((Path(adapter) / "adapter_config.json").read_text())
    assert config["task_type"] == "CAUSAL_LM" and config["base_model_name_or_path"] == str(tiny_model_dir.resolve())


def test_auto_peft_loads_the_adapter_alone_and_scores_the_sampled_tokens_as_the_sampler_did(trained, tiny_model_dir):
    _, adapter = trained
    prompt, completion, sampler_logprobs = sampled_by_the_sampler(adapter, tiny_model_dir)
    model = AutoPeftModelForCausalLM.from_pretrained(adapter, dtype=torch.float32).eval()
    assert scored(model, prompt, completion) == pytest.approx(sampler_logprobs, abs=1e-4)
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    assert scored(base, prompt, completion) != pytest.approx(sampler_logprobs, abs=1e-3), (
        "the adapter itself is what scores them"
    )


def test_sparring_export_writes_the_adapter_or_a_merged_model_that_score_the_same(trained, tiny_model_dir, tmp_path):
    run_dir, adapter = trained
    prompt, completion, sampler_logprobs = sampled_by_the_sampler(adapter, tiny_model_dir)

    result = runner.invoke(app, ["export", str(run_dir), str(tmp_path / "adapter")])
    assert result.exit_code == 0, result.output
    assert "AutoPeftModelForCausalLM" in result.output
    exported = AutoPeftModelForCausalLM.from_pretrained(str(tmp_path / "adapter"), dtype=torch.float32).eval()
    assert scored(exported, prompt, completion) == pytest.approx(sampler_logprobs, abs=1e-4)
    assert AutoTokenizer.from_pretrained(str(tmp_path / "adapter")).chat_template, (
        "the tokenizer (and its chat template) travels with it"
    )

    result = runner.invoke(app, ["export", str(run_dir), str(tmp_path / "merged"), "--merged"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"), dtype=torch.float32).eval()
    assert scored(merged, prompt, completion) == pytest.approx(sampler_logprobs, abs=1e-4)

    again = runner.invoke(app, ["export", str(run_dir), str(tmp_path / "merged")])
    assert again.exit_code == 2 and "not empty" in again.output
    missing = runner.invoke(app, ["export", str(tmp_path / "nothing"), str(tmp_path / "out")])
    assert missing.exit_code == 2 and "error:" in missing.output
