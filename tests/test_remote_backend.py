"""The remote training backend: models that live on a Tinker-protocol service, reached with the real tinker SDK.

One `sparring serve` process on the tiny model stands in for the service, on
loopback. Checked here: the low-level API (`ServiceClient(base_url=...)`)
gives the in-process numbers; `tune()` with backend 'tinker' trains on
exactly the tokens and logprobs the service sampled (recorded where the SDK
hands them over); `sparring train` killed with SIGKILL after a checkpoint
resumes from the state saved on the service (weights and optimizer) to the
configured step count, and the trained adapter and its snapshot opponent
sample through the SDK afterwards; a remote model without a service URL is
a clear config error.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sparring_server import serving
from typer.testing import CliRunner

import sparring
from sparring import AlgorithmConfig, DatasetConfig, LoggingConfig, TunerModelConfig, tune
from sparring.cli import app as cli_app
from sparring.envs.guess_number import guess_number
from sparring.logging import read_metrics, read_rollouts
from sparring.logging.rollouts import sampled_spans
from sparring.server.tinker.checkpoints import CheckpointStore
from sparring.trainer import ConfigError, TuneConfig, run_training

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11) or importlib.util.find_spec("tinker") is None,
    reason="the tinker SDK (Python 3.11+) is not installed",
)

API_KEY = "tml-remote-backend-test"
WORKFLOW_ARGS = {"low": 1, "high": 8, "max_turns": 2}
TASKS = [{"task_id": f"t{i}", "secret": 2 + i} for i in range(4)]
QUIET = LoggingConfig(console=False, tensorboard=False)


@pytest.fixture(scope="module")
def service(tiny_model_dir, tmp_path_factory):
    with serving(tiny_model_dir, tmp_path_factory.mktemp("remote-service"), API_KEY) as served:
        yield served


def test_the_low_level_api_on_a_service_gives_the_in_process_numbers(service, tiny_model_dir, tmp_path):
    from test_server_tinker import assert_same

    remote = sparring.ServiceClient(base_url=service.url, api_key=API_KEY)
    got = _low_level_scenario(remote, str(tiny_model_dir))
    # In-process on an engine of its own, as fresh as the service's: the process-wide engine of tiny_model_dir that
    # earlier tests used can sample this scenario's logprobs ~1e-4 apart, a history this test is not about.
    local_model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    want = _low_level_scenario(sparring.ServiceClient(base_dir=tmp_path / "checkpoints"), str(local_model))
    assert_same(got, want)
    assert got["sample_tokens"][0] != got["sample_tokens"][1]


def _low_level_scenario(service: sparring.ServiceClient, base_model: str) -> dict:
    """Train, sample, save and restore through sparring's own API and types; the numbers, for comparison."""
    import tinker_scenario as scenario

    types = sparring.types
    found: dict = {}
    training = service.create_lora_training_client(base_model, rank=4, seed=7)
    ppo = training.forward_backward(
        scenario.batch(types, "ppo"), "ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
    )
    step = training.optim_step(types.AdamParams(learning_rate=0.05))
    found["ppo"], found["grad_norm"] = scenario.outputs(ppo.result()), step.result().metrics["grad_norm"]
    scored = types.ModelInput.from_ints(scenario.PROMPT + scenario.COMPLETIONS[0])
    live = training.save_weights_and_get_sampling_client(kind="inflight")
    found["live_before"] = live.compute_logprobs(scored).result()
    training.forward_backward(scenario.batch(types, "cross_entropy"), "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=0.05)).result()
    found["live_after"] = live.compute_logprobs(scored).result()  # the in-flight sampler follows the step
    assert found["live_after"] != found["live_before"]
    found["forward"] = scenario.outputs(
        training.forward(scenario.batch(types, "cross_entropy"), "cross_entropy").result()
    )
    snapshot = training.save_weights_and_get_sampling_client()
    sampled = snapshot.sample(
        types.ModelInput.from_ints(scenario.PROMPT), 2, types.SamplingParams(max_tokens=5, seed=123)
    ).result()
    found["sample_tokens"] = [sequence.tokens for sequence in sampled.sequences]
    found["sample_logprobs"] = [sequence.logprobs for sequence in sampled.sequences]
    saved = training.save_state("checkpoint-1").result().path
    restored = service.create_training_client_from_state(saved)
    found["restored_forward"] = scenario.outputs(
        restored.forward(scenario.batch(types, "cross_entropy"), "cross_entropy").result()
    )
    sampler_path = training.save_weights_for_sampler("final").result().path
    found["saved_sampler"] = service.create_sampling_client(model_path=sampler_path).compute_logprobs(scored).result()
    found["base"] = service.create_sampling_client(base_model=base_model).compute_logprobs(scored).result()
    return found


def test_tune_trains_on_a_service_on_exactly_what_it_sampled(service, tiny_model_dir, tmp_path, monkeypatch):
    import tinker

    returned: list[tuple[list[int], list[float]]] = []  # every sequence the service sampled, as the SDK hands it over
    sent: list = []  # every datum the SDK sent to forward_backward
    sample, forward_backward = tinker.SamplingClient.sample, tinker.TrainingClient.forward_backward

    def recorded_sample(self, *args, **kwargs):
        submitted = sample(self, *args, **kwargs)
        submitted.future().add_done_callback(
            lambda done: returned.extend((list(s.tokens), list(s.logprobs)) for s in done.result().sequences)
        )
        return submitted

    def recorded_forward_backward(self, data, *args, **kwargs):
        sent.extend(data)
        return forward_backward(self, data, *args, **kwargs)

    monkeypatch.setattr(tinker.SamplingClient, "sample", recorded_sample)
    monkeypatch.setattr(tinker.TrainingClient, "forward_backward", recorded_forward_backward)
    model = TunerModelConfig(
        model_path=str(tiny_model_dir),
        backend="tinker",
        base_url=service.url,
        api_key=API_KEY,
        max_tokens=6,
        lora_rank=4,
    )
    result = tune(
        workflow_func=guess_number,
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=2, workflow_args=WORKFLOW_ARGS),
        model=model,
        algorithm=AlgorithmConfig(group_size=2, batch_size=2, learning_rate=1e-3, drop_zero_variance_groups=False),
        run_dir=tmp_path / "run",
        logging=QUIET,
    )
    assert result.steps == 2 and result.sampler_paths["policy"].startswith("tinker://")
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [1, 2]

    rows = [
        row
        for step in (1, 2)
        for row in read_rollouts(tmp_path / "run" / "rollouts" / f"step_{step}.jsonl")
        if "agent" in row
    ]
    recorded = [
        (row["tokens"][start:end], row["logprobs"][start:end])
        for row in rows
        for start, end in sampled_spans(row["loss_mask"])
    ]
    # Every call's sampled tokens and logprobs are recorded as the service returned them, and nothing else is.
    assert recorded and sorted(recorded) == sorted(returned)
    assert len(sent) == len(rows)  # one datum per timeline, all of them trained
    for tokens, logprobs in returned:
        assert any(_holds(datum, tokens, logprobs) for datum in sent), (
            f"sampled {tokens} was not trained with its sampler logprobs"
        )


def _holds(datum, tokens: list[int], logprobs: list[float]) -> bool:
    """Whether the datum's targets contain `tokens` with exactly `logprobs` as their behaviour logprobs."""
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy().tolist()
    behaviour = datum.loss_fn_inputs["logprobs"].to_numpy()
    expected = np.asarray(logprobs, dtype=np.float32)
    return any(
        targets[p : p + len(tokens)] == tokens and np.array_equal(behaviour[p : p + len(tokens)], expected)
        for p in range(len(targets) - len(tokens) + 1)
    )


def test_a_killed_train_resumes_from_the_state_saved_on_the_service(service, tiny_model_dir, tmp_path):
    import tinker

    run_dir = tmp_path / "run"
    config = {
        "workflow": "sparring.envs.guess_number:guess_number",
        "run_dir": str(run_dir),
        "model": {"model_path": str(tiny_model_dir), "backend": "tinker", "max_tokens": 6, "lora_rank": 4},
        "auxiliary_models": {"opponent": {"snapshot_of": "policy", "snapshot_interval_steps": 2}},
        "algorithm": {
            "group_size": 2,
            "batch_size": 1,
            "learning_rate": 1e-3,
            "drop_zero_variance_groups": False,
        },
        "checkpoints": {"interval_steps": 1},
        "train_dataset": {"tasks": TASKS, "total_steps": 3, "workflow_args": WORKFLOW_ARGS},
        "logging": {"console": False, "tensorboard": False},
    }
    config_file = tmp_path / "job.yaml"
    config_file.write_text(json.dumps(config))  # JSON is YAML
    # The service's URL and key come from the environment (the config names neither).
    env = {**os.environ, "TINKER_BASE_URL": service.url, "TINKER_API_KEY": API_KEY, "HF_HUB_OFFLINE": "1"}
    train = [sys.executable, "-m", "sparring.cli", "train"]
    trainer = subprocess.Popen(
        [*train, str(config_file)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    latest = run_dir / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 120
    while not latest.exists():
        assert trainer.poll() is None, f"the trainer ended before its first checkpoint:\n{trainer.stdout.read()}"
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    service.process.send_signal(signal.SIGSTOP)  # the trainer cannot take another step while we look
    try:
        killed_at = _checkpoint_step(run_dir)
        trainer.kill()
        trainer.wait(timeout=30)
    finally:
        service.process.send_signal(signal.SIGCONT)
    assert 1 <= killed_at < 3
    killed_state = _trainer_state(run_dir)

    resumed = subprocess.run([*train, "--resume", str(run_dir)], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "done: 3 steps" in resumed.stdout
    assert [m["step"] for m in read_metrics(run_dir)] == [1, 2, 3]
    final = _trainer_state(run_dir)
    assert final["step"] == 3 and final["backends"] == {"policy": "tinker"}
    assert (
        final["models"]["policy"].startswith("tinker://")
        and final["models"]["policy"] != killed_state["models"]["policy"]
    )
    # The service's record of the final state: the optimizer went on from the killed run's steps (a fresh one would
    # have 3 - killed_at).
    store = CheckpointStore(service.base_dir)
    assert json.loads((store.local(final["models"]["policy"]) / "state.json").read_text())["optimizer_steps"] == 3
    snapshot = final["snapshots"]["opponent"]
    assert snapshot["step"] == 2 and snapshot["path"].startswith("tinker://")

    final_sampler = next(
        line.split(": ", 1)[1] for line in resumed.stdout.splitlines() if line.strip().startswith("policy: ")
    )
    client = tinker.ServiceClient(base_url=service.url, api_key=API_KEY)
    try:
        prompt = tinker.types.ModelInput.from_ints([1, 5, 9, 13])
        for path in (final_sampler.strip(), snapshot["path"]):
            sampler = client.create_sampling_client(model_path=path).result()
            response = sampler.sample(prompt, 2, tinker.types.SamplingParams(max_tokens=4, seed=5)).result()
            assert len(response.sequences) == 2
            assert all(0 < len(s.tokens) <= 4 and len(s.logprobs) == len(s.tokens) for s in response.sequences)
    finally:
        client.close("success").result()


def _trainer_state(run_dir: Path) -> dict:
    pointer = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    return json.loads((Path(pointer["path"]) / "trainer_state.json").read_text())


def _checkpoint_step(run_dir: Path) -> int:
    return int(_trainer_state(run_dir)["step"])


def test_a_remote_model_needs_a_service_url_and_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    with pytest.raises(
        ConfigError, match=r"^base_url: backend 'tinker' needs the service's URL; set base_url or the TINKER_BASE_URL"
    ):
        TunerModelConfig(backend="tinker")
    with pytest.raises(ConfigError, match=r"^model: base_url: backend 'tinker'"):
        TuneConfig(model={"backend": "tinker"})
    config_file = tmp_path / "job.yaml"
    config_file.write_text(
        "workflow: sparring.envs.guess_number:guess_number\nmodel: {backend: tinker}\ntrain_dataset: "
        "{tasks: [{secret: 3}]}\n"
    )
    outcome = CliRunner().invoke(cli_app, ["train", str(config_file)], env={"TINKER_BASE_URL": None})
    assert outcome.exit_code == 2 and "model: base_url: backend 'tinker' needs the service's URL" in outcome.output

    with pytest.raises(ConfigError, match="device/dtype: with backend 'tinker' the service picks"):
        TunerModelConfig(backend="tinker", base_url="http://127.0.0.1:9", device="cuda")
    with pytest.raises(ConfigError, match="adapter_path: backend 'tinker' starts from weights saved on the service"):
        TunerModelConfig(backend="tinker", base_url="http://127.0.0.1:9", adapter_path="runs/x/final")
    # backend 'local' keeps base_url's meaning: a frozen OpenAI-compatible endpoint, which cannot be trained.
    with pytest.raises(ConfigError, match=r"model.base_url: a remote endpoint cannot be trained"):
        TuneConfig(model={"base_url": "http://127.0.0.1:9/v1"})
    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("TINKER_API_KEY", "from-env")
    model = TunerModelConfig(backend="tinker")
    assert (model.service_url(), model.service_api_key(), model.is_remote) == ("http://127.0.0.1:9", "from-env", False)
    with pytest.raises(ValueError, match="picks its own device and dtype"):
        sparring.ServiceClient(base_url="http://127.0.0.1:9", device="cuda")


def test_rollouts_run_ahead_on_a_service_and_a_stopped_run_resumes_there(service, tiny_model_dir, tmp_path):
    def job(total_steps: int) -> dict:
        return {
            "workflow": "sparring.envs.guess_number:guess_number",
            "run_dir": str(tmp_path / "run"),
            "model": {
                "model_path": str(tiny_model_dir),
                "backend": "tinker",
                "base_url": service.url,
                "api_key": API_KEY,
                "max_tokens": 6,
                "lora_rank": 4,
            },
            "auxiliary_models": {"opponent": {"snapshot_of": "policy", "snapshot_interval_steps": 2}},
            "algorithm": {
                "group_size": 2,
                "batch_size": 1,
                "learning_rate": 1e-3,
                "drop_zero_variance_groups": False,
                "max_staleness": 1,
            },
            "checkpoints": {"interval_steps": 1},
            "train_dataset": {"tasks": TASKS, "total_steps": total_steps, "workflow_args": WORKFLOW_ARGS},
            "logging": {"console": False, "tensorboard": False},
        }

    run_training(TuneConfig.from_dict(job(2)))
    state = _trainer_state(tmp_path / "run")
    assert list(state["versions"]) == ["1"] and state["versions"]["1"]["policy"].startswith(
        "tinker://"
    )  # what rollout 2 samples
    resumed = run_training(TuneConfig.from_dict(job(3)), resume=tmp_path / "run")
    assert resumed.steps == 3
    assert [m["staleness/max"] for m in read_metrics(tmp_path / "run")] == [0.0, 1.0, 1.0]
    assert _trainer_state(tmp_path / "run")["snapshots"]["opponent"]["path"].startswith("tinker://")


def test_a_constrained_call_on_the_remote_backend_is_refused_by_name(service, tiny_model_dir):
    import asyncio

    from sparring.rollout import FrozenChatModel

    remote = sparring.ServiceClient(base_url=service.url, api_key=API_KEY)
    model = FrozenChatModel(remote.create_sampling_client(base_model=str(tiny_model_dir)), defaults={"max_tokens": 8})
    assert asyncio.run(model([{"role": "user", "content": "hi"}])).tokens  # it samples freely
    with pytest.raises(
        ValueError, match=r"backend 'tinker' samples on the remote service, which cannot constrain a reply \(choices\)"
    ):
        asyncio.run(model([{"role": "user", "content": "Vote."}], choices=["Player1", "Player2"]))
