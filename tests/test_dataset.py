"""Task loading (every file format, directories, errors), task preparation, TaskStream and eval splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparring.trainer.config import DatasetConfig
from sparring.trainer.dataset import (
    DatasetError,
    TaskStream,
    load_tasks,
    load_train_and_eval_tasks,
    prepare_tasks,
    split_eval,
)

ROWS = [{"seed": 0, "question": "a"}, {"seed": 1, "question": "b"}, {"seed": 2, "question": "c"}]


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def seeds(tasks) -> list:
    return [task["seed"] for task in tasks]


# --- formats -------------------------------------------------------------------------------------


def test_jsonl_tasks_get_ids_and_workflow_args(tmp_path):
    path = write_jsonl(
        tmp_path / "seeds.jsonl",
        [*ROWS[:2], {"seed": 9, "task_id": "nine", "workflow_args": {"target": "villager", "x": 1}}],
    )
    (tmp_path / "seeds.jsonl").write_text((tmp_path / "seeds.jsonl").read_text() + "\n  \n")  # blank lines are skipped
    tasks = load_tasks(DatasetConfig(path=str(path), workflow_args={"target": "werewolf"}))
    assert [task["task_id"] for task in tasks] == ["0", "1", "nine"]
    assert [task["workflow_args"] for task in tasks] == [
        {"target": "werewolf"},
        {"target": "werewolf"},
        {"target": "villager", "x": 1},
    ]
    assert tasks[0]["question"] == "a"


def test_jsonl_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"seed": 0}\n{"seed": \n')
    with pytest.raises(DatasetError, match=rf"^{path}:2: invalid JSON"):
        load_tasks(DatasetConfig(path=str(path)))
    path.write_text('{"seed": 0}\n\n[1, 2]\n')
    with pytest.raises(DatasetError, match=rf"^{path}:3: expected an object of task fields, got list \[1, 2\]"):
        load_tasks(DatasetConfig(path=str(path)))
    path.write_text("\n")
    with pytest.raises(DatasetError, match=rf"^{path}: no tasks found \(split 'train'\)"):
        load_tasks(DatasetConfig(path=str(path)))


def test_json_shapes(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(ROWS))
    assert seeds(load_tasks(DatasetConfig(path=str(path)))) == [0, 1, 2]
    path.write_text(json.dumps({"train": ROWS[:1], "test": ROWS[1:]}))
    assert seeds(load_tasks(DatasetConfig(path=str(path), split="test"))) == [1, 2]
    path.write_text(json.dumps({"data": ROWS[:2], "version": 3}))
    assert seeds(load_tasks(DatasetConfig(path=str(path)))) == [0, 1]
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))  # JSON Lines under a .json name
    assert seeds(load_tasks(DatasetConfig(path=str(path)))) == [0, 1, 2]


def test_json_errors(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"items": ROWS}))
    with pytest.raises(DatasetError, match=r"an object with a 'train' or 'data' list; found keys \['items'\]"):
        load_tasks(DatasetConfig(path=str(path)))
    path.write_text(json.dumps([{"seed": 0}, "oops"]))
    with pytest.raises(DatasetError, match=rf"^{path}: item 1: expected an object"):
        load_tasks(DatasetConfig(path=str(path)))
    path.write_text('[{"seed": 0},\n{"seed" 1}]')
    with pytest.raises(DatasetError, match=rf"^{path}:2: invalid JSON"):
        load_tasks(DatasetConfig(path=str(path)))


def test_csv_values_stay_strings(tmp_path):
    path = tmp_path / "tasks.csv"
    path.write_text('\ufeffseed,question\n0,what is 2+2?\n1,"a, b"\n', encoding="utf-8")
    tasks = load_tasks(DatasetConfig(path=str(path)))
    assert [(task["seed"], task["question"]) for task in tasks] == [("0", "what is 2+2?"), ("1", "a, b")]


def test_csv_ragged_rows_name_the_line(tmp_path):
    path = tmp_path / "tasks.csv"
    path.write_text("seed,question\n0,a\n1,b,extra\n")
    with pytest.raises(DatasetError, match=rf"^{path}:3: more values than the 2 header columns"):
        load_tasks(DatasetConfig(path=str(path)))
    path.write_text("seed,question\n0\n")
    with pytest.raises(DatasetError, match=rf"^{path}:2: fewer values"):
        load_tasks(DatasetConfig(path=str(path)))


def test_parquet(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")

    path = tmp_path / "tasks.parquet"
    parquet.write_table(pyarrow.Table.from_pylist(ROWS), path)
    tasks = load_tasks(DatasetConfig(path=str(path)))
    assert seeds(tasks) == [0, 1, 2] and tasks[2]["question"] == "c"
    (tmp_path / "corrupt.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        load_tasks(DatasetConfig(path=str(tmp_path / "corrupt.parquet")))


def test_saved_hf_datasets_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:2]), "test": datasets.Dataset.from_list(ROWS[2:])}
    )
    splits.save_to_disk(str(tmp_path / "saved"))
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path / "saved")))) == [0, 1]
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path / "saved"), split="test"))) == [2]
    with pytest.raises(DatasetError, match=r"no split 'validation'; available splits: \['train', 'test'\]"):
        load_tasks(DatasetConfig(path=str(tmp_path / "saved"), split="validation"))
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "single"))
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path / "single")))) == [0, 1, 2]


# --- directories of files ------------------------------------------------------------------------


def test_directory_picks_files_of_the_split(tmp_path):
    write_jsonl(tmp_path / "data" / "train-00000-of-00002.jsonl", ROWS[:1])
    write_jsonl(tmp_path / "data" / "train-00001-of-00002.jsonl", ROWS[1:2])
    write_jsonl(tmp_path / "data" / "test.jsonl", ROWS[2:])
    write_jsonl(tmp_path / ".cache" / "train.jsonl", [{"seed": 99}])
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path)))) == [0, 1]
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path), split="test"))) == [2]
    with pytest.raises(
        DatasetError, match=r"no file for split 'validation'; files of other splits: \['data/test.jsonl'"
    ):
        load_tasks(DatasetConfig(path=str(tmp_path), split="validation"))


def test_directory_without_split_names_reads_every_file(tmp_path):
    write_jsonl(tmp_path / "seeds_a.jsonl", ROWS[:2])
    (tmp_path / "seeds_b.json").write_text(json.dumps(ROWS[2:]))
    (tmp_path / "README.md").write_text("not data")
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path)))) == [0, 1, 2]
    assert [task["task_id"] for task in load_tasks(DatasetConfig(path=str(tmp_path)))] == ["0", "1", "2"]


def test_dataset_name_selects_a_subdirectory(tmp_path):
    write_jsonl(tmp_path / "easy" / "train.jsonl", ROWS[:1])
    write_jsonl(tmp_path / "hard" / "train.jsonl", ROWS[1:])
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path), name="hard"))) == [1, 2]
    with pytest.raises(DatasetError, match="no subdirectory 'medium'"):
        load_tasks(DatasetConfig(path=str(tmp_path), name="medium"))
    with pytest.raises(DatasetError, match="the path is a file"):
        load_tasks(DatasetConfig(path=str(tmp_path / "easy" / "train.jsonl"), name="easy"))


def test_path_errors(tmp_path, monkeypatch):
    with pytest.raises(DatasetError, match="does not exist"):
        load_tasks(DatasetConfig(path=str(tmp_path / "missing.jsonl")))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        DatasetError,
        match=r"dataset path openai/gsm8k does not exist; .* \(if that is a Hugging Face hub name: nothing is "
        r"downloaded",
    ):
        load_tasks(DatasetConfig(path="openai/gsm8k"))
    with pytest.raises(
        DatasetError,
        match=r"data/train.jsonl does not exist; give a .jsonl/.json/.csv/.parquet file or a directory of them$",
    ):
        load_tasks(DatasetConfig(path="data/train.jsonl"))
    (tmp_path / "tasks.txt").write_text("hello")
    with pytest.raises(DatasetError, match="unsupported dataset format '.txt'"):
        load_tasks(DatasetConfig(path=str(tmp_path / "tasks.txt")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no .jsonl/.json/.csv/.parquet files"):
        load_tasks(DatasetConfig(path=str(tmp_path / "empty")))


# --- Hugging Face `datasets` layouts, read without the package --------------------------------------


def write_parquet(path: Path, rows) -> Path:
    import pyarrow.parquet

    path.parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    return path


def write_arrow_stream(path: Path, rows) -> str:
    import pyarrow

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pyarrow.Table.from_pylist(rows)
    with pyarrow.OSFile(str(path), "wb") as sink, pyarrow.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return path.name


def hf_layouts(root: Path) -> dict[str, Path]:
    """One folder per layout `datasets.load_dataset(DIR)` infers splits from; train holds seed 0 (and 1), test 2."""
    layouts = {name: root / name for name in ("files", "shards", "folders", "keywords")}
    write_jsonl(layouts["files"] / "train.jsonl", ROWS[:2])
    write_jsonl(layouts["files"] / "validation.jsonl", [{"seed": 5, "question": "v"}])
    write_jsonl(layouts["files"] / "test.jsonl", ROWS[2:])
    write_parquet(layouts["shards"] / "data" / "train-00000-of-00002.parquet", ROWS[:1])
    write_parquet(layouts["shards"] / "data" / "train-00001-of-00002.parquet", ROWS[1:2])
    write_parquet(layouts["shards"] / "data" / "test-00000-of-00001.parquet", ROWS[2:])
    for index, row in enumerate(ROWS[:2]):
        (layouts["folders"] / "data" / "train").mkdir(parents=True, exist_ok=True)
        (layouts["folders"] / "data" / "train" / f"part_{index}.json").write_text(json.dumps([row]))
    (layouts["folders"] / "data" / "test").mkdir(parents=True)
    (layouts["folders"] / "data" / "test" / "part_0.json").write_text(json.dumps(ROWS[2:]))
    write_jsonl(layouts["keywords"] / "my_train_set.jsonl", ROWS[:2])
    write_jsonl(layouts["keywords"] / "my-dev-set.jsonl", [{"seed": 5, "question": "v"}])
    write_jsonl(layouts["keywords"] / "eval.jsonl", ROWS[2:])
    (layouts["keywords"] / "README.md").write_text("# a card without a YAML header\n")
    return layouts


def test_split_files_of_every_inferred_layout(tmp_path):
    for name, folder in hf_layouts(tmp_path).items():
        assert seeds(load_tasks(DatasetConfig(path=str(folder)))) == [0, 1], name
        assert seeds(load_tasks(DatasetConfig(path=str(folder), split="test"))) == [2], name
    for folder in (tmp_path / "files", tmp_path / "keywords"):
        assert seeds(load_tasks(DatasetConfig(path=str(folder), split="validation"))) == [5]
        assert seeds(load_tasks(DatasetConfig(path=str(folder), split="dev"))) == [5]  # a keyword names its split
    write_parquet(tmp_path / "shards" / "data" / "extra-00000-of-00001.parquet", [{"seed": 7}])
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path / "shards"), split="extra"))) == [
        7
    ]  # any shard's split name


def test_a_missing_split_names_the_path_and_the_splits_found(tmp_path):
    folders = hf_layouts(tmp_path)
    with pytest.raises(
        DatasetError, match=r"folders: no file for split 'validation'; .* splits found: \['train', 'test'\]$"
    ):
        load_tasks(DatasetConfig(path=str(folders["folders"]), split="validation"))
    write_jsonl(tmp_path / "plain" / "tasks.jsonl", ROWS)
    with pytest.raises(
        DatasetError,
        match=r"plain: no split 'test': no file or folder name marks a split, so every file is the 'train' split",
    ):
        load_tasks(DatasetConfig(path=str(tmp_path / "plain"), split="test"))


CARD = """---
license: mit
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
- config_name: everything
  data_files: "*/train-*.parquet"
---
# A dataset card as the hub's download has it
"""


def test_a_dataset_cards_configs_choose_the_files(tmp_path):
    write_parquet(tmp_path / "main" / "train-00000-of-00001.parquet", ROWS[:2])
    write_parquet(tmp_path / "main" / "test-00000-of-00001.parquet", ROWS[2:])
    write_parquet(tmp_path / "socratic" / "train-00000-of-00001.parquet", [{"seed": 8}])
    (tmp_path / "README.md").write_text(CARD)
    with pytest.raises(
        DatasetError,
        match=r"the dataset card lists configs \['main', 'socratic', 'everything'\] and none is the default; "
        r"pick one with `name`",
    ):
        load_tasks(DatasetConfig(path=str(tmp_path)))
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path), name="main", split="test"))) == [2]
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path), name="socratic"))) == [8]
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path), name="everything"))) == [0, 1, 8]
    with pytest.raises(
        DatasetError, match=r"no split 'test' in config 'socratic' of the dataset card; splits found: \['train'\]"
    ):
        load_tasks(DatasetConfig(path=str(tmp_path), name="socratic", split="test"))
    with pytest.raises(
        DatasetError,
        match=r"no config 'default' in the dataset card; its configs: \['main', 'socratic', 'everything'\]",
    ):
        load_tasks(DatasetConfig(path=str(tmp_path), name="default"))
    (tmp_path / "README.md").write_text(
        CARD.replace("- config_name: socratic", "- config_name: socratic\n  default: true")
    )
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path)))) == [8]


def test_a_save_to_disk_folder_reads_without_datasets(tmp_path):
    """The layout `DatasetDict.save_to_disk` writes, written here with pyarrow alone: splits listed, shards in order."""
    saved = tmp_path / "saved"
    for split, shards in {"train": [ROWS[1:2], ROWS[:1]], "test": [ROWS[2:]]}.items():
        files = [
            write_arrow_stream(saved / split / f"data-{index:05d}-of-{len(shards):05d}.arrow", rows)
            for index, rows in enumerate(shards)
        ]
        (saved / split / "state.json").write_text(
            json.dumps({"_data_files": [{"filename": name} for name in files], "_split": None})
        )
        (saved / split / "dataset_info.json").write_text("{}")
    (saved / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    assert seeds(load_tasks(DatasetConfig(path=str(saved)))) == [1, 0]
    assert seeds(load_tasks(DatasetConfig(path=str(saved), split="test"))) == [2]
    with pytest.raises(DatasetError, match=r"saved: no split 'validation'; available splits: \['train', 'test'\]"):
        load_tasks(DatasetConfig(path=str(saved), split="validation"))
    assert seeds(load_tasks(DatasetConfig(path=str(saved / "test")))) == [2]  # one saved Dataset: every split
    assert seeds(load_tasks(DatasetConfig(path=str(tmp_path), name="saved", split="test"))) == [
        2
    ]  # a config's folder, saved
    (saved / "test" / "data-00000-of-00001.arrow").write_bytes(b"not arrow")
    with pytest.raises(DatasetError, match="not a readable Arrow file"):
        load_tasks(DatasetConfig(path=str(saved), split="test"))


def test_the_layouts_split_as_datasets_load_dataset_splits_them(tmp_path):
    """Where the `datasets` package is installed: it reads every layout above into the same splits."""
    datasets = pytest.importorskip("datasets")
    for name, folder in hf_layouts(tmp_path / "layouts").items():
        loaded = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))
        for split in loaded:
            ours = load_tasks(DatasetConfig(path=str(folder), split=split))
            assert [{key: task[key] for key in ("seed", "question")} for task in ours] == loaded[split].to_list(), (
                name,
                split,
            )


# --- in-memory tasks and preparation -------------------------------------------------------------


def test_task_list_limit_and_copies():
    rows = [{"seed": index} for index in range(10)]
    tasks = load_tasks(DatasetConfig(tasks=rows, limit=3))
    assert seeds(tasks) == [0, 1, 2]
    tasks[0]["seed"] = 100
    assert rows[0] == {"seed": 0}


def test_task_workflow_args_must_be_an_object():
    with pytest.raises(DatasetError, match="the tasks list: task 1: workflow_args must be an object, got str"):
        load_tasks(DatasetConfig(tasks=[{}, {"workflow_args": "werewolf"}]))


def test_prepare_tasks_is_idempotent():
    once = prepare_tasks([{"seed": 0, "workflow_args": {"a": 2}}], {"a": 1, "b": 1})
    assert once == [{"seed": 0, "workflow_args": {"a": 2, "b": 1}, "task_id": "0"}]
    assert prepare_tasks(once, {"a": 1, "b": 1}) == once


# --- TaskStream ----------------------------------------------------------------------------------


def make_tasks(count: int) -> list[dict]:
    return prepare_tasks([{"seed": index} for index in range(count)], {})


def test_stream_is_deterministic_and_covers_each_epoch():
    first = [seeds(batch) for batch in TaskStream(make_tasks(10), 4, total_epochs=3, seed=7)]
    second = [seeds(batch) for batch in TaskStream(make_tasks(10), 4, total_epochs=3, seed=7)]
    assert first == second
    assert [len(batch) for batch in first] == [4, 4, 2] * 3
    epochs = [sum(first[index : index + 3], []) for index in (0, 3, 6)]
    assert all(sorted(epoch) == list(range(10)) for epoch in epochs)
    assert epochs[0] != epochs[1]
    other_seed = [seeds(batch) for batch in TaskStream(make_tasks(10), 4, total_epochs=3, seed=8)]
    assert other_seed != first


def test_stream_without_shuffle_keeps_order():
    batches = [seeds(batch) for batch in TaskStream(make_tasks(5), 2, total_epochs=2, shuffle=False)]
    assert batches == [[0, 1], [2, 3], [4], [0, 1], [2, 3], [4]]


def test_total_steps_replaces_epochs():
    stream = TaskStream(make_tasks(5), 2, total_epochs=1, total_steps=7, shuffle=False)
    assert stream.num_steps == 7 and stream.steps_per_epoch == 3
    batches = list(stream)
    assert len(batches) == 7 and stream.epoch == 2 and stream.step == 7
    short = TaskStream(make_tasks(5), 2, total_epochs=4, total_steps=2)
    assert short.num_steps == 2 and len(list(short)) == 2
    assert TaskStream(make_tasks(5), 2, total_epochs=4).num_steps == 12


@pytest.mark.parametrize("stop_after", [0, 1, 3, 5, 8])
def test_resume_continues_with_the_same_batches(stop_after):
    reference = [seeds(batch) for batch in TaskStream(make_tasks(7), 3, total_epochs=4, seed=3)]
    interrupted = TaskStream(make_tasks(7), 3, total_epochs=4, seed=3)
    for _ in range(stop_after):
        next(interrupted)
    state = json.loads(json.dumps(interrupted.state_dict()))  # as it travels through a checkpoint
    resumed = TaskStream(make_tasks(7), 3, total_epochs=4, seed=3)
    resumed.load_state_dict(state)
    assert resumed.step == stop_after
    assert [seeds(batch) for batch in resumed] == reference[stop_after:]


def test_a_stream_built_at_a_saved_position_continues_there():
    config = DatasetConfig(tasks=make_tasks(7), total_epochs=3, seed=5)
    reference = [seeds(batch) for batch in TaskStream.from_config(config, 3)]
    interrupted = TaskStream.from_config(config, 3)
    for _ in range(4):
        next(interrupted)
    resumed = TaskStream.from_config(config, 3, state=json.loads(json.dumps(interrupted.state_dict())))
    assert resumed.step == 4 and [seeds(batch) for batch in resumed] == reference[4:]


def test_resume_checks_the_dataset():
    state = TaskStream(make_tasks(7), 3).state_dict()
    with pytest.raises(DatasetError, match="the dataset has 8 tasks but the saved state was taken with 7"):
        TaskStream(make_tasks(8), 3).load_state_dict(state)
    with pytest.raises(ValueError, match="lacks"):
        TaskStream(make_tasks(7), 3).load_state_dict({"epoch": 0})


def test_stream_yields_copies():
    stream = TaskStream(make_tasks(2), 2, total_epochs=2, shuffle=False)
    first = next(stream)
    first[0]["workflow_args"]["mutated"] = True
    assert next(stream)[0]["workflow_args"] == {}


def test_stream_from_config_and_bad_arguments(tmp_path):
    config = DatasetConfig(
        path=str(write_jsonl(tmp_path / "t.jsonl", ROWS)), total_epochs=2, shuffle=False, workflow_args={"k": 1}
    )
    batches = list(TaskStream.from_config(config, batch_size=2))
    assert [seeds(batch) for batch in batches] == [[0, 1], [2], [0, 1], [2]]
    assert batches[0][0]["workflow_args"] == {"k": 1}
    with pytest.raises(DatasetError, match="at least one task"):
        TaskStream([], 2)
    with pytest.raises(ValueError, match="must be >= 1"):
        TaskStream(make_tasks(2), 0)


# --- eval split ----------------------------------------------------------------------------------


def test_split_eval():
    tasks = make_tasks(10)
    train, evaluation = split_eval(tasks, 0.2, seed=1)
    assert len(train) == 8 and len(evaluation) == 2
    assert sorted(seeds(train) + seeds(evaluation)) == list(range(10))
    assert seeds(train) == sorted(seeds(train)) and seeds(evaluation) == sorted(seeds(evaluation))
    assert split_eval(tasks, 0.2, seed=1) == (train, evaluation)
    assert split_eval(tasks, 0.0, seed=1) == (tasks, [])
    assert len(split_eval(tasks, 0.01, seed=1)[1]) == 1
    with pytest.raises(DatasetError, match="leaves no training tasks"):
        split_eval(make_tasks(1), 0.5, seed=0)


def test_load_train_and_eval_tasks():
    train_config = DatasetConfig(tasks=[{"seed": index} for index in range(10)], eval_fraction=0.3)
    train, evaluation = load_train_and_eval_tasks(train_config, None)
    assert (len(train), len(evaluation)) == (7, 3)
    train, evaluation = load_train_and_eval_tasks(DatasetConfig(tasks=ROWS), DatasetConfig(tasks=[{"seed": 5}]))
    assert seeds(train) == [0, 1, 2] and seeds(evaluation) == [5]
