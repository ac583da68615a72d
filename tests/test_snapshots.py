"""Policy snapshots as auxiliary models: config checks, no second copy of the base weights, frozen while the
policy trains, retaken every N steps, and a resumed run plays against exactly the snapshot it had."""

import asyncio

import pytest
from safetensors.torch import load_file

from sparring import (
    AlgorithmConfig,
    CheckpointsConfig,
    DatasetConfig,
    Job,
    LoggingConfig,
    RunnerConfig,
    ServiceClient,
    TunerModelConfig,
    WorkflowOutput,
    types,
)
from sparring.logging import read_metrics
from sparring.trainer import ConfigError, TuneConfig, run_training
from sparring.trainer.resolve import build_models

TASKS = [{"topic": f"topic {i}"} for i in range(4)]
QUIET = LoggingConfig(console=False, tensorboard=False)


def test_snapshot_config_is_checked_and_inherits_from_its_source():
    config = TuneConfig(
        model=TunerModelConfig(model_path="some-model", max_tokens=5, temperature=0.7),
        auxiliary_models={"rival": TunerModelConfig(snapshot_of="policy", snapshot_interval_steps=2, temperature=1.0)},
    )
    rival = config.auxiliary_models["rival"]
    assert (rival.model_path, rival.max_tokens, rival.temperature, rival.trainable) == ("some-model", 5, 1.0, False)
    assert (
        TuneConfig.from_dict(config.model_dump(mode="json")).auxiliary_models["rival"] == rival
    )  # a dumped config reloads
    bad = [
        (
            {"auxiliary_models": {"rival": {"snapshot_of": "nobody"}}},
            "auxiliary_models.rival.snapshot_of: no trainable model 'nobody'",
        ),
        (
            {"auxiliary_models": {"rival": {"snapshot_of": "policy", "model_path": "other"}}},
            "auxiliary_models.rival.model_path: a snapshot shares",
        ),
        (
            {"auxiliary_models": {"rival": {"snapshot_of": "policy", "base_url": "http://x"}}},
            "auxiliary_models.rival.base_url",
        ),
        (
            {"auxiliary_models": {"rival": {"snapshot_interval_steps": 3}}},
            "auxiliary_models.rival.snapshot_interval_steps",
        ),
        ({"model": {"snapshot_of": "policy"}}, "model.snapshot_of: only auxiliary models"),
        (
            {"auxiliary_models": {"rival": {"snapshot_of": "policy", "snapshot_interval_steps": -1}}},
            "snapshot_interval_steps",
        ),
    ]
    for data, message in bad:
        with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
            TuneConfig.from_dict(data)


def test_a_snapshot_copies_only_the_lora_weights_and_stays_frozen(tiny_model_dir, tmp_path):
    client = ServiceClient(base_dir=tmp_path).create_lora_training_client(str(tiny_model_dir), rank=4, seed=0)
    model = client.engine.bank.causal_lm
    before = sum(p.numel() for p in model.parameters())
    lora = sum(p.numel() for p in client.engine.bank.parameters(client.adapter))
    snapshot = client.save_weights_and_get_sampling_client(kind="snapshot")
    assert snapshot.engine is client.engine  # the same base model in memory
    assert (
        sum(p.numel() for p in client.engine.bank.causal_lm.parameters()) - before == lora
    )  # only the adapter was copied

    tokens = client.get_renderer().render([{"role": "user", "content": "hello there"}])
    prompt = types.ModelInput.from_ints(tokens)
    live = client.save_weights_and_get_sampling_client(kind="inflight")
    frozen_before = snapshot.compute_logprobs(prompt).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0]},
    )
    for _ in range(3):
        client.forward_backward([datum], "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert snapshot.compute_logprobs(prompt).result() == frozen_before
    assert live.compute_logprobs(prompt).result() != frozen_before


async def versus_rival(task, model, auxiliary_models):
    """The reward depends on how likely the rival (a snapshot) finds its own reply: it changes with the snapshot's
    weights."""
    said = await model([{"role": "user", "content": task["topic"]}])
    answer = await auxiliary_models["rival"]([{"role": "user", "content": said.content or "hello"}])
    return WorkflowOutput(reward=sum(answer.logprobs) / max(len(answer.logprobs), 1) + 0.1 * len(said.tokens))


def snapshot_job(tiny_model_dir, run_dir, total_steps):
    model = TunerModelConfig(model_path=str(tiny_model_dir), max_tokens=6, lora_rank=4)
    job = Job(
        model=model,
        auxiliary_models={"rival": TunerModelConfig(snapshot_of="policy", snapshot_interval_steps=2)},
        algorithm=AlgorithmConfig(group_size=2, batch_size=2, learning_rate=2e-2, seed=5),
        runner=RunnerConfig(episode_timeout_s=60),
        checkpoints=CheckpointsConfig(interval_steps=1),
        run_dir=run_dir,
        logging=QUIET,
    )
    return job.set_workflow("tests.test_snapshots:versus_rival").set_data(
        train=DatasetConfig(tasks=TASKS, total_steps=total_steps)
    )


def test_snapshots_are_retaken_every_n_steps_and_resume_exactly(tiny_model_dir, tmp_path):
    straight = run_training(snapshot_job(tiny_model_dir, tmp_path / "straight", 4).config)
    metrics = read_metrics(tmp_path / "straight")
    assert [m["snapshot/rival/age_steps"] for m in metrics] == [0, 1, 0, 1]
    (policy_dir,) = (tmp_path / "straight" / "checkpoints").glob("*/sampler_weights/snapshot-rival-step-000000")
    saved = [
        load_file(policy_dir.parent / f"snapshot-rival-step-{step:06d}" / "adapter_model.safetensors")
        for step in (0, 2)
    ]
    assert any(not saved[0][key].equal(saved[1][key]) for key in saved[0])  # the step-2 snapshot is a newer policy

    # Stopped after step 3: its checkpoint holds the snapshot taken at step 2, which the resumed run must use.
    run_training(snapshot_job(tiny_model_dir, tmp_path / "stopped", 3).config)
    config_file = tmp_path / "stopped" / "config.yaml"
    config_file.write_text(config_file.read_text().replace("total_steps: 3", "total_steps: 4"))
    resumed = Job.load_yaml(config_file).tune(resume=str(tmp_path / "stopped"))
    rewards = [[m["reward/mean"] for m in read_metrics(tmp_path / name)] for name in ("straight", "stopped")]
    assert rewards[0] == pytest.approx(rewards[1], abs=1e-5)  # float32 logprobs; a loaded machine moved them 2e-6 once
    weights = [load_file(f"{run.sampler_paths['policy']}/adapter_model.safetensors") for run in (straight, resumed)]
    assert all(weights[0][key].allclose(weights[1][key], atol=1e-5) for key in weights[0])

    # Control: the rival's weights change what it says, so resuming against the wrong snapshot would show.
    models = build_models(Job.load_yaml(config_file).config, tmp_path / "control")
    fresh = models.auxiliary["rival"]  # a snapshot of a fresh policy
    models.load_snapshot("rival", str(policy_dir.parent / "snapshot-rival-step-000002"), 2)
    message = [{"role": "user", "content": "topic 1"}]
    answers = [asyncio.run(rival(message, seed=3)) for rival in (fresh, models.auxiliary["rival"])]
    assert answers[0].logprobs != answers[1].logprobs
