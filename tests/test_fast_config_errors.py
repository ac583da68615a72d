"""A malformed config is reported before the heavy imports: `sparring train` names the bad field, exits 2, and has not
imported torch, transformers or peft by then (seconds of imports on a small machine, none needed to read a YAML
file)."""

import dataclasses
import subprocess
import sys

import pytest

from sparring.rollout import RunnerSettings
from sparring.trainer.config import RUNNER_DEFAULTS

CLI_THEN_IMPORTED = """
import sys
from sparring.cli import main
sys.argv = ["sparring", "train", *sys.argv[1:]]
try:
    main()
except SystemExit as done:
    heavy = ("torch", "transformers", "peft")
    print("exit", done.code, "imported", sorted(name for name in heavy if name in sys.modules))
"""

BAD_CONFIGS = {
    "a wrong type": (
        "algorithm:\n  algorithm_type: grpo\n  learning_rate: fast\nworkflow: "
        "sparring.envs.guess_number:guess_number\n",
        "algorithm.learning_rate",
    ),
    "an unknown field": ("model:\n  model_path: smollm2-135m-instruct\n  lora_rnak: 4\n", "model.lora_rnak"),
    "a bound passed": ("algorithm:\n  loss_fn: ppo\n  group_size: 100000\n", "algorithm.group_size"),
    "not YAML": ("algorithm: [unclosed\n", "bad.yaml"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_config_is_reported_without_importing_torch(tmp_path, case):
    text, named = BAD_CONFIGS[case]
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    ran = subprocess.run(
        [sys.executable, "-c", CLI_THEN_IMPORTED, str(config)], capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.strip() == "exit 2 imported []", ran.stdout + ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("error: ") and named in line, line


def test_the_configs_runner_defaults_are_the_runners():
    defaults = {field.name: field.default for field in dataclasses.fields(RunnerSettings)}
    assert RUNNER_DEFAULTS == {name: defaults[name] for name in RUNNER_DEFAULTS}
