"""Every malformed config is one line on stderr and exit code 2, through the real command line.

Each case starts from a valid job on the tiny model, breaks one thing (a field's type or bound, an
unknown field, the file, the import path of the workflow, loss or advantage function, a dataset file, a
model's path or name, a device) and runs `sparring train` (or `run` / `eval`) in a fresh folder. It must exit with
code 2 and print exactly one non-empty line on stderr that names the field or the file, with no
traceback, and leave the folder exactly as it was: no run directory behind. The errors are found
before any model loads (but in the one case that is a folder which does not load as a model).
Every case runs in process (an interpreter start costs seconds of CPU);
two run again as real processes. `tune()` raises the same one-line ConfigError / DatasetError
instead of printing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparring import DatasetConfig, LoggingConfig, TunerModelConfig, tune
from sparring.cli import app
from sparring.trainer import ConfigError, DatasetError

TASKS = "".join(f'{{"secret": {n}}}\n' for n in (3, 9, 12, 5))


def valid_job(folder: Path, tiny_model_dir: Path) -> dict:
    (folder / "tasks.jsonl").write_text(TASKS)
    return {
        "workflow": "sparring.envs.guess_number:guess_number",
        "run_dir": str(folder / "run"),
        "model": {"model_path": str(tiny_model_dir), "max_tokens": 4, "lora_rank": 4},
        "algorithm": {"group_size": 2, "batch_size": 2, "learning_rate": 1e-3},
        "train_dataset": {"path": str(folder / "tasks.jsonl"), "total_steps": 1, "workflow_args": {"max_turns": 2}},
        "eval_dataset": {"path": str(folder / "tasks.jsonl"), "workflow_args": {"max_turns": 2}},
        "logging": {"tensorboard": False, "console": False},
    }


@dataclass
class Case:
    """One malformed config: how it breaks the valid job, the command that meets it, what the line must name."""

    name: str
    """The test id."""
    names: tuple[str, ...]
    """What the error line must contain: field paths, file names ({folder} stands for the case's folder), bounds."""
    change: Callable[[dict, Path], None] = lambda job, folder: None
    """Breaks the valid job dict in place (the folder holds tasks.jsonl; it may write more files there)."""
    args: list[str] = field(default_factory=lambda: ["train", "job.yaml"])
    """The command line after `sparring`, run in the case's folder."""
    file_text: str | None = None
    """The config file's text, when it is not the (changed) job as YAML."""


def put(path: str, value) -> Callable[[dict, Path], None]:
    """A change that sets the dotted `path` of the job to `value`."""

    def change(job: dict, folder: Path) -> None:
        *parents, last = path.split(".")
        node = job
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return change


def tasks_file(content: str) -> Callable[[dict, Path], None]:
    def change(job: dict, folder: Path) -> None:
        (folder / "tasks.jsonl").write_text(content)

    return change


def not_a_model(job: dict, folder: Path) -> None:
    (folder / "broken").mkdir()
    (folder / "broken" / "config.json").write_text("{}")
    job["model"]["model_path"] = str(folder / "broken")


def empty_folder(job: dict, folder: Path) -> None:
    (folder / "empty").mkdir()
    job["train_dataset"]["path"] = str(folder / "empty")


SEARCH_LIMIT = 200
"""The in-process cases search dataset folders up to this many entries (the real bound, 10,000, costs seconds to
fill)."""


def crowded_folder(job: dict, folder: Path) -> None:
    crowd = folder / "crowd"
    crowd.mkdir()
    for index in range(SEARCH_LIMIT + 1):
        (crowd / f"note{index}.txt").touch()
    job["train_dataset"]["path"] = str(crowd)


CASES = [
    # datasets
    Case(
        "dataset_file_missing",
        ("train_dataset.path", "missing.jsonl", "does not exist"),
        put("train_dataset.path", "missing.jsonl"),
    ),
    Case("dataset_is_an_empty_folder", ("train_dataset.path", "no .jsonl"), empty_folder),
    Case(
        "dataset_folder_too_big_to_search",
        ("train_dataset.path", f"more than {SEARCH_LIMIT} files and folders"),
        crowded_folder,
    ),
    Case(
        "jsonl_line_not_json",
        ("train_dataset.path", "{folder}/tasks.jsonl:2", "invalid JSON"),
        tasks_file('{"secret": 3}\n{"secret": \n'),
    ),
    Case(
        "jsonl_line_not_an_object",
        ("train_dataset.path", "{folder}/tasks.jsonl:1", "expected an object"),
        tasks_file("[1, 2]\n"),
    ),
    Case(
        "eval_dataset_missing_in_eval",
        ("eval_dataset.path", "nowhere.jsonl"),
        put("eval_dataset.path", "nowhere.jsonl"),
        ["eval", "job.yaml"],
    ),
    Case(
        "eval_without_eval_tasks",
        ("eval_dataset", "no eval tasks"),
        lambda job, folder: job.pop("eval_dataset"),
        ["eval", "job.yaml"],
    ),
    # models and devices
    Case(
        "model_path_missing",
        ("model.model_path", "/nonexistent/model", "Known models"),
        put("model.model_path", "/nonexistent/model"),
    ),
    Case(
        "model_name_unknown",
        ("model.model_path", "gpt-17-turbo", "Known models"),
        put("model.model_path", "gpt-17-turbo"),
    ),
    Case("model_folder_does_not_load", ("model.model_path", "{folder}/broken", "does not load"), not_a_model),
    Case(
        "auxiliary_model_unknown",
        ("auxiliary_models.helper.model_path", "nope-7b"),
        put("auxiliary_models", {"helper": {"model_path": "nope-7b"}}),
    ),
    Case("device_unknown", ("model.device", "'gpu' is not a torch device", "'cpu'"), put("model.device", "gpu")),
    Case("device_absent", ("model.device", "cuda:99"), put("model.device", "cuda:99")),
    Case(
        "adapter_missing_in_eval",
        ("model.adapter_path", "no-such-adapter"),
        args=["eval", "job.yaml", "--adapter", "no-such-adapter"],
    ),
    # workflow import paths
    Case("workflow_module_missing", ("workflow:", "no_such_module_xyz"), put("workflow", "no_such_module_xyz:play")),
    Case(
        "workflow_attribute_missing",
        ("workflow:", "no attribute 'no_such_game'"),
        put("workflow", "sparring.envs.guess_number:no_such_game"),
    ),
    Case(
        "workflow_not_callable", ("workflow:", "not an async function"), put("workflow", "sparring.envs.registry:GAMES")
    ),
    Case("workflow_not_async", ("workflow:", "not an async function"), put("workflow", "json:dumps")),
    Case(
        "workflow_bad_in_run",
        ("workflow:", "no_such_module_xyz"),
        put("workflow", "no_such_module_xyz:play"),
        ["run", "job.yaml"],
    ),
    # the workflow's typed arguments (its WorkflowArgs record)
    Case(
        "workflow_arg_misspelt",
        ("train_dataset.workflow_args.max_turn", "did you mean max_turns?"),
        put("train_dataset.workflow_args", {"max_turn": 2}),
    ),
    Case(
        "workflow_arg_wrong_type",
        ("eval_dataset.workflow_args.max_turns", "valid integer", "'two'"),
        put("eval_dataset.workflow_args.max_turns", "two"),
    ),
    Case(
        "workflow_arg_in_a_task",
        ("train_dataset: task 1: workflow_args.hihg", "did you mean high?"),
        tasks_file('{"secret": 3}\n{"secret": 9, "workflow_args": {"hihg": 20}}\n'),
    ),
    Case(
        "workflow_arg_misspelt_in_run",
        ("train_dataset.workflow_args.max_turn", "did you mean max_turns?"),
        put("train_dataset.workflow_args", {"max_turn": 2}),
        ["run", "job.yaml"],
    ),
    # loss and advantage function import paths
    Case(
        "loss_fn_module_missing",
        ("algorithm.loss_fn:", "no module named 'no_such_module_xyz'"),
        put("algorithm.loss_fn", "no_such_module_xyz:loss"),
    ),
    Case(
        "algorithm_type_not_callable",
        ("algorithm.algorithm_type:", "not an advantage function"),
        put("algorithm.algorithm_type", "sparring.envs.registry:GAMES"),
    ),
    # the file
    Case("config_file_empty", ("job.yaml: workflow: not set",), file_text=""),
    Case("config_file_missing", ("cannot read config file elsewhere.yaml",), args=["train", "elsewhere.yaml"]),
    Case(
        "config_file_invalid_yaml", ("job.yaml:2:", "invalid YAML"), file_text="workflow: x\n  bad: indentation: here\n"
    ),
    Case("config_file_a_list", ("job.yaml", "top level must be a mapping"), file_text="- a\n- b\n"),
    Case(
        "config_file_duplicate_key",
        ("job.yaml:4:3", "duplicate key 'group_size' (first given on line 2)"),
        file_text="algorithm:\n  group_size: 4\n  learning_rate: 0.0001\n  group_size: 8\n",
    ),
    Case("unknown_game", ("guess_numbr", "known games"), args=["train", "guess_numbr"]),
    # fields: unknown, wrong types, negative values, bounds
    Case("unknown_field", ("algorithm.gruop_size", "group_size"), put("algorithm.gruop_size", 4)),
    Case("unknown_top_level_field", ("workflw", "unknown field"), put("workflw", "x:y")),
    Case("wrong_type_int", ("algorithm.group_size", "valid integer"), put("algorithm.group_size", "many")),
    Case("wrong_type_section", ("job.yaml: model: ",), put("model", "tiny")),
    Case("wrong_type_bool", ("train_dataset.shuffle", "valid boolean"), put("train_dataset.shuffle", "sometimes")),
    Case(
        "negative_batch_size", ("algorithm.batch_size", "greater than or equal to 1"), put("algorithm.batch_size", -2)
    ),
    Case(
        "negative_learning_rate",
        ("algorithm.learning_rate", "greater than or equal to 0"),
        put("algorithm.learning_rate", -1e-4),
    ),
    Case(
        "group_size_1e12_in_file",
        ("algorithm.group_size", "less than or equal to 1024"),
        put("algorithm.group_size", 1e12),
    ),
    Case(
        "group_size_1e12_by_set",
        ("algorithm.group_size", "less than or equal to 1024"),
        args=["train", "job.yaml", "--set", "algorithm.group_size=1e12"],
    ),
    Case(
        "batch_size_bound", ("algorithm.batch_size", "less than or equal to 4096"), put("algorithm.batch_size", 100_000)
    ),
    Case(
        "episodes_per_step_bound",
        ("algorithm.batch_size", "65536"),
        lambda job, folder: job["algorithm"].update(group_size=1024, batch_size=1024),
    ),
    Case(
        "total_steps_bound",
        ("train_dataset.total_steps", "less than or equal to 1000000"),
        put("train_dataset.total_steps", 10**9),
    ),
    Case("max_tokens_bound", ("model.max_tokens", "less than or equal to 131072"), put("model.max_tokens", 10**9)),
    Case("max_tokens_beyond_context", ("model.max_tokens", "max_model_len 4"), put("model.max_model_len", 4)),
    Case("lora_rank_bound", ("model.lora_rank", "less than or equal to 1024"), put("model.lora_rank", 100_000)),
    Case(
        "learning_rate_bound",
        ("algorithm.learning_rate", "less than or equal to 1"),
        put("algorithm.learning_rate", 5.0),
    ),
    Case(
        "timeout_bound",
        ("runner.episode_timeout_s", "less than or equal to 86400"),
        put("runner.episode_timeout_s", 1e9),
    ),
    Case("error_reward_nan", ("runner.error_reward", "finite number"), put("runner.error_reward", float("nan"))),
]


def prepare(case: Case, folder: Path, tiny_model_dir: Path) -> set[str]:
    """Write the case's files into `folder`; returns what the folder holds then."""
    job = valid_job(folder, tiny_model_dir)
    case.change(job, folder)
    (folder / "job.yaml").write_text(yaml.safe_dump(job) if case.file_text is None else case.file_text)
    return contents(folder)


def contents(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def problems_with(case: Case, folder: Path, before: set[str], exit_code: int, stderr: str) -> list[str]:
    """What is wrong with how the command met the case: the exit code, the stderr lines, what it left behind."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    problems = [] if exit_code == 2 else [f"exit code {exit_code}"]
    if len(lines) != 1 or "Traceback" in stderr:
        problems.append(f"{len(lines)} stderr lines")
    else:
        missing = [name.format(folder=folder) for name in case.names if name.format(folder=folder) not in lines[0]]
        if not lines[0].startswith("error: ") or missing:
            problems.append(f"the line does not name {missing}")
    if contents(folder) != before:
        problems.append(f"left behind {sorted(contents(folder) - before)[:3]}")
    return problems


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_malformed_config_is_one_line_and_exit_code_2(case, tmp_path, tiny_model_dir, monkeypatch):
    """In process (typer's runner: the real exit code and stderr, an uncaught exception would show as exit code 1)."""
    before = prepare(case, tmp_path, tiny_model_dir)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sparring.dataset_folders.MAX_SEARCH_ENTRIES", SEARCH_LIMIT)
    result = CliRunner().invoke(app, case.args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    problems = problems_with(case, tmp_path, before, result.exit_code, result.stderr)
    assert not problems, f"{problems}\n{result.stderr}"


def test_as_processes_too(tmp_path, tiny_model_dir):
    """Two of the cases as real `python -m sparring.cli` processes: nothing else reaches stderr, no run dir."""
    chosen = [case for case in CASES if case.name in ("jsonl_line_not_json", "model_path_missing")]
    folders = {case.name: tmp_path / case.name for case in chosen}
    before = {}
    for case in chosen:
        folders[case.name].mkdir()
        before[case.name] = prepare(case, folders[case.name], tiny_model_dir)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

    def run(case: Case) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "sparring.cli", *case.args],
            cwd=folders[case.name],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    with ThreadPoolExecutor(max_workers=len(chosen)) as pool:  # an interpreter start costs seconds of CPU
        results = dict(zip(folders, pool.map(run, chosen), strict=True))
    failures = {
        case.name: problems_with(
            case, folders[case.name], before[case.name], results[case.name].returncode, results[case.name].stderr
        )
        for case in chosen
    }
    assert not any(failures.values()), {
        name: (problems, results[name].stderr) for name, problems in failures.items() if problems
    }


def test_there_are_at_least_twenty_cases():
    assert len(CASES) >= 20 and len({case.name for case in CASES}) == len(CASES)


QUIET = LoggingConfig(console=False, tensorboard=False)


async def play(task, model, auxiliary_models):
    raise AssertionError("never runs: the config is refused first")


@pytest.mark.parametrize(
    "arguments, error, names",
    [
        (
            {"train_dataset": "missing.jsonl"},
            DatasetError,
            "train_dataset.path: dataset path missing.jsonl does not exist",
        ),
        (
            {"model": TunerModelConfig(model_path="gpt-17-turbo")},
            ConfigError,
            "model.model_path: unknown model 'gpt-17-turbo'",
        ),
        ({"model": TunerModelConfig(device="cuda:99")}, ConfigError, "model.device: 'cuda:99'"),
        (
            {"workflow_func": "no_such_module_xyz:play"},
            ConfigError,
            "workflow: cannot import 'no_such_module_xyz:play'",
        ),
    ],
)
def test_tune_raises_the_same_one_line_errors_and_leaves_no_run_dir(tmp_path, tiny_model_dir, arguments, error, names):
    arguments = {
        "workflow_func": play,
        "train_dataset": DatasetConfig(tasks=[{"secret": 3}]),
        "model": TunerModelConfig(model_path=str(tiny_model_dir)),
        **arguments,
    }
    with pytest.raises(error) as caught:
        tune(**arguments, run_dir=tmp_path / "runs" / "first", logging=QUIET)
    assert names in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "runs").exists()


def test_several_problems_share_one_line_and_each_is_listed():
    with pytest.raises(ConfigError) as caught:
        LoggingConfig(console="loud", tensorboard="maybe")
    assert "\n" not in str(caught.value)
    assert [problem.split(":")[0] for problem in caught.value.problems] == ["tensorboard", "console"]
