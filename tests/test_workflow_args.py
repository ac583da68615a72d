"""A workflow's typed `workflow_args` (issue 68): each packaged game and the `sparring new` scaffold declare them as a
`WorkflowArgs` record, checked when the run is resolved; a misspelt key names the closest valid one, a wrong type
names the key, and a workflow that declares nothing keeps its plain dict. Through the command line (one line, exit
code 2) these errors are cases of tests/test_config_errors.py."""

from __future__ import annotations

import pytest

from sparring import ConfigError, Workflow, WorkflowArgs, takes_args
from sparring.envs.guess_number import GuessNumberArgs, guess_number
from sparring.envs.registry import GAMES, load_config, load_game_config
from sparring.envs.scaffold import new_game
from sparring.trainer import load_train_and_eval_tasks
from sparring.trainer.config import check_config_args
from sparring.trainer.config_file import import_object
from sparring.trainer.schema import check_task_args, declared_args


@pytest.mark.parametrize("game", GAMES)
def test_every_packaged_game_declares_its_args_and_its_config_and_tasks_fit_them(game):
    config = load_game_config(game)
    record = declared_args(import_object(config.workflow))
    assert record is not None and issubclass(record, WorkflowArgs), f"{game}'s workflow declares no WorkflowArgs"
    undocumented = [name for name, field in record.model_fields.items() if not field.description]
    assert not undocumented, f"{record.__name__}: fields without a docstring: {undocumented}"
    check_config_args(config, record)
    for tasks in load_train_and_eval_tasks(config.train_dataset, config.eval_dataset):
        check_task_args(record, tasks, "tasks")


def test_a_misspelt_key_names_the_closest_valid_one():
    config = load_game_config("werewolf", ["train_dataset.workflow_args.max_round=3"])
    misspelt = r"^train_dataset\.workflow_args\.max_round: unknown field; did you mean max_rounds\?$"
    with pytest.raises(ConfigError, match=misspelt):
        check_config_args(config, declared_args(import_object(config.workflow)))
    with pytest.raises(ConfigError, match=r"^workflow_args\.opponnent: unknown field; did you mean opponent\?$"):
        import_object("sparring.envs.tictactoe:TicTacToeArgs").of({"workflow_args": {"opponnent": "random"}})


def test_a_wrong_type_or_value_names_the_key():
    config = load_game_config("guess_number", ["eval_dataset.workflow_args.max_turns=some"])
    with pytest.raises(ConfigError, match=r"^eval_dataset\.workflow_args\.max_turns: .*valid integer.*\(got 'some'\)$"):
        check_config_args(config, GuessNumberArgs)
    with pytest.raises(ConfigError, match=r"workflow_args\.trainable_target: .*'good_guy' \(got 'wolves'\)"):
        import_object("sparring.envs.werewolf:WerewolfArgs").of({"workflow_args": {"trainable_target": "wolves"}})
    with pytest.raises(ConfigError, match=r"^workflow_args: low \(9\) must not be above high \(3\)$"):
        GuessNumberArgs.of({"workflow_args": {"low": 9, "high": 3}})


def test_a_task_of_its_own_is_checked_with_its_index():
    record = declared_args(guess_number)
    check_task_args(record, [{"workflow_args": {"max_turns": 3}}], "train_dataset")
    tasks = [{"task_id": "t0"}, {"task_id": "t1", "workflow_args": {"max_tunrs": 3}}]
    with pytest.raises(ConfigError, match=r"^train_dataset: task t1: workflow_args\.max_tunrs: .*max_turns\?$"):
        check_task_args(record, tasks, "train_dataset")


def test_the_record_reads_typed_with_its_defaults():
    args = GuessNumberArgs.of({"workflow_args": {"max_turns": "4", "progress_bonus": 1}})
    assert (args.low, args.high, args.max_turns, args.progress_bonus) == (1, 16, 4, 1.0)
    assert GuessNumberArgs.of({}) == GuessNumberArgs()


def test_a_class_style_workflow_declares_them_as_a_class_attribute_and_undeclared_ones_stay_a_dict():
    debate = import_object("sparring.envs.debate:Debate")
    assert declared_args(debate).__name__ == "DebateArgs" and declared_args(debate()) is declared_args(debate)

    class Free(Workflow):
        async def execute(self, task, tuner):
            return None

    async def plain(task, model, auxiliary_models):
        return None

    assert declared_args(Free) is None and declared_args(plain) is None
    config = load_game_config("guess_number", ["train_dataset.workflow_args.anything=1"])
    assert config.train_dataset.workflow_args["anything"] == 1  # no record, no check: the workflow reads the dict


def test_a_declaration_must_be_a_record():
    with pytest.raises(TypeError, match="WorkflowArgs subclass"):
        takes_args(dict)

    async def odd(task, model, auxiliary_models):
        return None

    odd.workflow_args = {"rounds": 1}
    with pytest.raises(ConfigError, match="not a WorkflowArgs subclass"):
        declared_args(odd)


def test_a_league_needs_the_opponent_field():
    config = load_game_config("tictactoe")
    assert config.league is not None
    check_config_args(config, declared_args(import_object(config.workflow)))
    sections = ("train_dataset", "eval_dataset")
    bare = {name: getattr(config, name).model_copy(update={"workflow_args": {}}) for name in sections}
    with pytest.raises(ConfigError, match=r"^league: .*workflow_args\.opponent.*GuessNumberArgs has no field"):
        check_config_args(config.model_copy(update={**bare, "validation": None}), GuessNumberArgs)


def test_a_scaffolded_game_declares_typed_args_that_its_config_fits(tmp_path):
    folder = new_game("echo_game", tmp_path)
    assert "class EchoGameArgs(WorkflowArgs):" in (folder / "workflow.py").read_text()
    config = load_config(folder / "config.yaml")
    record = declared_args(import_object(config.workflow))
    assert record.__name__ == "EchoGameArgs" and list(record.model_fields) == ["exact_bonus"]
    check_config_args(config, record)
    misspelt = load_config(folder / "config.yaml", ["train_dataset.workflow_args.exact_bonsu=1"])
    with pytest.raises(ConfigError, match=r"train_dataset\.workflow_args\.exact_bonsu: .*did you mean exact_bonus\?"):
        check_config_args(misspelt, record)
