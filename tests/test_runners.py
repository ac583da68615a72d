"""The runner registry: `runner.backend` names exactly the runners there are, 'local' plays in this process, a
name that is none fails naming the choices, and Ray stays an optional extra (never imported unless chosen)."""

import subprocess
import sys
import textwrap
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparring import RunnerConfig
from sparring.rollout import as_episode_fn
from sparring.rollout.player import play_in_process
from sparring.runners import RUNNERS, make_player


async def workflow(task, model, auxiliary_models):
    return None


@dataclass
class Choice:
    backend: str
    ray_address: str | None = None
    ray_num_cpus: float = 1.0


def test_the_config_names_every_runner_and_no_other():
    assert set(typing.get_args(RunnerConfig.model_fields["backend"].annotation)) == set(RUNNERS)


def test_local_plays_in_process():
    assert make_player(RunnerConfig(backend="local"), as_episode_fn(workflow)) is play_in_process


def test_an_unknown_runner_names_the_runners_there_are():
    with pytest.raises(ValueError, match="runner.backend: no runner 'slurm'; use one of 'local', 'ray'"):
        make_player(Choice("slurm"), as_episode_fn(workflow))


def test_ray_is_imported_only_when_chosen():
    """Without Ray installed, 'local' works and 'ray' fails saying how to install it."""
    script = textwrap.dedent(
        """
        import sys

        class NoRay:
            def find_spec(self, name, path=None, target=None):
                if name == "ray" or name.startswith("ray."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, NoRay())
        from sparring.rollout import as_episode_fn
        from sparring.runners import make_player
        from sparring.trainer.config import RunnerConfig

        async def workflow(task, model, auxiliary_models):
            return None

        make_player(RunnerConfig(backend="local"), as_episode_fn(workflow))
        assert not any(name == "ray" or name.startswith("ray.") for name in sys.modules), "ray was imported"
        try:
            make_player(RunnerConfig(backend="ray"), as_episode_fn(workflow))
        except ImportError as error:
            print(error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "runner.backend 'ray' needs Ray, which is not installed: pip install 'sparring[ray]'"
