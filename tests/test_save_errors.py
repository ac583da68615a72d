"""A save that fails on the operating system's side (a full disk, a folder it may not write) ends `sparring train` with
one line naming the path and what was already saved, and exit code 1 -- not a traceback.

The tests run as root on CI, where a read-only folder stays writable, so the failure is injected where the bytes are
written: the writer raises the OSError a full disk raises (ENOSPC) from the second checkpoint on.
"""

import errno
import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from sparring.cli import app
from sparring.logging import metrics as metrics_module
from sparring.trainer import checkpoints

runner = CliRunner()


def write_job(tmp_path: Path, tiny_model_dir: Path) -> Path:
    job = {
        "workflow": "sparring.envs.guess_number:guess_number",
        "run_dir": str(tmp_path / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 3, "lora_rank": 2},
        "algorithm": {"group_size": 2, "batch_size": 1, "allow_nothing_trained": True},
        "checkpoints": {"interval_steps": 1},
        "train_dataset": {"tasks": [{"secret": 3}, {"secret": 5}], "total_steps": 3, "workflow_args": {"max_turns": 1}},
        "logging": {"tensorboard": False, "console": False},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def disk_full_from_step(step: int, write):
    def full(path: Path, text: str) -> None:
        if path.name == "trainer_state.json" and json.loads(text)["step"] >= step:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write(path, text)

    return full


def test_a_full_disk_during_a_checkpoint_is_one_line_naming_the_file_and_the_checkpoint_intact(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(checkpoints, "write_atomically", disk_full_from_step(2, checkpoints.write_atomically))
    result = runner.invoke(app, ["train", str(write_job(tmp_path, tiny_model_dir))])
    assert result.exit_code == 1, result.output + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert "Traceback" not in result.stderr
    state_file = tmp_path / "run" / "checkpoints" / "step_000002" / "trainer_state.json"
    assert line == (
        f"error: could not write the checkpoint of step 2 at {state_file}: No space left on device (errno 28); "
        f"the checkpoint of step 1 ({tmp_path / 'run' / 'checkpoints' / 'step_000001'}) is intact"
    )
    assert checkpoints.verify_checkpoint(checkpoints.latest_checkpoint(tmp_path / "run"))["step"] == 1


def test_a_full_disk_outside_a_checkpoint_is_one_line_naming_the_file_and_what_is_saved(
    tiny_model_dir, tmp_path, monkeypatch
):
    logged = metrics_module.MetricsLogger.log

    def full_after_the_first_step(self, step, metrics):
        if step >= 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "metrics.jsonl"))
        logged(self, step, metrics)

    monkeypatch.setattr(metrics_module.MetricsLogger, "log", full_after_the_first_step)
    result = runner.invoke(app, ["train", str(write_job(tmp_path, tiny_model_dir))])
    assert result.exit_code == 1, result.output + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert errors == [
        f"error: could not write {tmp_path / 'run' / 'metrics.jsonl'}: No space left on device; the checkpoint "
        f"{tmp_path / 'run' / 'checkpoints' / 'step_000001'} is saved; continue with: sparring train "
        f"--resume {tmp_path / 'run'}"
    ], result.stderr
