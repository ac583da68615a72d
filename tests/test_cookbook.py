"""The Tinker cookbook's multiplayer recipes train against `sparring serve`, unmodified (opt-in: `-m cookbook`).

It installs `tinker-cookbook` 0.6.1, so it runs only when asked: `pytest -m cookbook tests/test_cookbook.py`. The
cookbook lives in a venv of its own, built once and kept in the pytest cache; it sees this interpreter's packages
through a `.pth` file (so torch, transformers and the tinker SDK are the ones sparring is tested with, and pip
never pulls another torch) and installs the rest from requirements/cookbook.txt (what the cookbook needs beyond
the venv, pinned by `make lock`). `tml-renderers` is left out: the cookbook imports it only for Inkling / Kimi models.

One server serves a model under the names the recipes ask for (`Qwen/Qwen3.5-4B` for the policy,
`Qwen/Qwen3.5-9B` for twenty questions' answerer) and writes their tokenizers into a hub cache of its own; each
recipe runs as `python -m tinker_cookbook.recipes.multiplayer_rl.<recipe>.train` with its defaults but for sizes,
one step, given only environment variables (`TINKER_BASE_URL`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`) and its own
CLI arguments. The model is the tiny random one with a longer context and, like SmolLM2, spare special tokens
(which give the recipes' Qwen3.5 renderer its single-token `<think>` / `</think>`), so the three recipes take
minutes; the commands in docs/coming-from.md are the same with SmolLM2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest
from cached_venv import cached_venv
from pip_overlay import pinned
from sparring_server import serving

from sparring.models import build_tiny_model

pytestmark = pytest.mark.cookbook

API_KEY = "tml-cookbook-test"
POLICY, ANSWERER = "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-9B"
ONE_STEP = ["eval_every=0", "save_every=0", "max_steps=1", "max_tokens=8", "behavior_if_log_dir_exists=delete"]


@pytest.fixture(scope="module", autouse=True)
def opted_in(request):
    if "cookbook" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("opt-in: installs tinker-cookbook and runs three of its recipes; run with -m cookbook")


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory) -> Path:
    """The tiny random chat model with a 4,096-token context (twenty questions' 20 turns) and two spare special
    tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("tiny-chat")
    base = build_tiny_model(root / "base", seed=0, max_position_embeddings=4096)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<spare_0>", "<spare_1>"]})
    model = AutoModelForCausalLM.from_pretrained(str(base))
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(str(root / "model"))
    tokenizer.save_pretrained(str(root / "model"))
    return root / "model"


@pytest.fixture(scope="module")
def cookbook_python(request, tmp_path_factory) -> Path:
    """Python of a venv holding tinker-cookbook 0.6.1 over this interpreter's packages; built once."""

    def see_this_interpreter(run, python: Path) -> None:
        site_packages = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
        (site_packages / "sparring_env.pth").write_text(
            f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
        )

    return cached_venv(request, tmp_path_factory, pinned("cookbook"), see_this_interpreter)


@pytest.fixture(scope="module")
def server(chat_model_dir, tmp_path_factory):
    """`sparring serve` with the model under its own name and the two Qwen names; yields (served, hub cache)."""
    directory = tmp_path_factory.mktemp("cookbook-server")
    hub = directory / "hub"
    names = (
        "--model",
        f"{POLICY}={chat_model_dir}",
        "--model",
        f"{ANSWERER}={chat_model_dir}",
        "--tokenizer-cache",
        str(hub),
    )
    with serving(chat_model_dir, directory, API_KEY, extra_args=names) as served:
        yield served, hub


def run_recipe(python: Path, server, recipe: str, log_path: Path, *args: str) -> list[dict]:
    """Run one cookbook recipe for one step against the server; its metrics.jsonl rows."""
    served, hub = server
    env = {
        **os.environ,
        "TINKER_BASE_URL": served.url,
        "TINKER_API_KEY": API_KEY,
        "HF_HUB_CACHE": str(hub),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    env.pop("PYTHONPATH", None)  # the cookbook's process needs nothing of sparring's
    command = [
        str(python),
        "-m",
        f"tinker_cookbook.recipes.multiplayer_rl.{recipe}.train",
        *args,
        *ONE_STEP,
        f"log_path={log_path}",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=800, cwd=log_path.parent)
    assert done.returncode == 0, (
        f"{recipe} failed:\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}\n--- server "
        f"---\n{served.log.read_text()[-3000:]}"
    )
    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert checkpoints[-1]["name"] == "final" and checkpoints[-1]["state_path"].startswith("tinker://"), checkpoints
    state = checkpoints[-1]["state_path"].removeprefix("tinker://")
    assert (served.base_dir / state).is_dir(), f"the final state {state} is not on the server under {served.base_dir}"
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def trained_step(rows: list[dict]) -> dict:
    """The metrics of the one training step (rollouts, rewards, tokens trained)."""
    step = next(row for row in rows if "env/all/reward/total" in row)
    assert step["progress/batch"] == 0 and step["tokens/trained"] > 0 and step["env/all/total_turns"] >= 1, step
    return step


def test_guess_the_number_trains_one_step(cookbook_python, server, tmp_path):
    trained_step(
        run_recipe(cookbook_python, server, "guess_number", tmp_path / "guess", "group_size=2", "batch_size=1")
    )


def test_tictactoe_self_play_trains_one_step(cookbook_python, server, tmp_path):
    args = ("batch_size=2", "num_train_datapoints=2", "num_test_datapoints=2", "test_opponent=random")
    trained_step(run_recipe(cookbook_python, server, "text_arena", tmp_path / "tictactoe", *args))


def test_twenty_questions_trains_one_step_with_the_served_answerer(cookbook_python, server, tmp_path):
    step = trained_step(
        run_recipe(cookbook_python, server, "twenty_questions", tmp_path / "twenty", "group_size=2", "batch_size=1")
    )
    assert step["env/all/total_turns"] >= 2  # every player turn waited for the answerer served as Qwen/Qwen3.5-9B
