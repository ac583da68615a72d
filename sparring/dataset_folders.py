"""Dataset folders: which files of a local dataset directory hold a split, found without the `datasets` package.

`split_files(directory, split, name)` covers the layouts `datasets.load_dataset(DIR)` reads, first match wins: (1) a
folder saved by `save_to_disk` (``dataset_dict.json`` lists the splits, each ``SPLIT/state.json`` its ``.arrow``
shards in order; a single saved ``Dataset`` has ``state.json`` at the top and is every split); (2) a dataset card
(``README.md``) whose YAML header lists ``configs`` with their ``data_files`` per split (a hub download): `name`
picks the config, else the ``default: true`` one or the only one; (3) a file's own split, from its path:
``{split}-00000-of-00003.parquet`` (a shard of any split name), else a folder named after a split (``train/``,
``data/dev-set/``), else a file name with a split keyword between separators (``train.jsonl``, ``tasks_test.csv``)
-- the keywords are `SPLIT_KEYWORDS`, so ``dev.jsonl`` is the ``validation`` split and ``eval.jsonl`` the ``test``
split, as in `datasets`; (4) no file names a split: every file is the ``train`` split. Without a dataset card,
`name` picks a subdirectory. A missing split is one line naming the directory and the splits it has. The search goes
`MAX_SEARCH_DEPTH` folders deep and stops at `MAX_SEARCH_ENTRIES` entries, so a path like ``~`` is refused rather
than crawled.

`DatasetError` is every dataset failure's type, raised here and by the trainer's task loading (`trainer/dataset.py`,
which reads the files found here and re-exports it), so a folder's layout and a file's rows fail alike, in one line.
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
"""Split name -> the words that mark a file or folder as that split (the keywords `datasets` uses)."""
NOT_DATA_FILES = frozenset(
    {"config.json", "dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json"}
)
"""Metadata files of dataset folders: never read as tasks."""
MAX_SEARCH_DEPTH = 2
MAX_SEARCH_ENTRIES = 10_000
SEPARATORS = "-._ 0-9"
_SHARD = re.compile(r"^(?P<split>\w+)-\d{5}-of-\d{5}")


class DatasetError(ValueError):
    """A dataset cannot be read or has no usable tasks; the message names the file and row."""


def canonical_split(name: str) -> str:
    """The split a name stands for: 'dev' -> 'validation', 'eval' -> 'test'; other names are their own split."""
    lowered = name.lower()
    return next((split for split, keywords in SPLIT_KEYWORDS.items() if lowered in keywords), name)


def split_files(directory: Path, split: str, name: str | None) -> list[Path]:
    """The data files of `split` (of config `name`) in a dataset directory, in reading order."""
    saved = _saved_dataset_files(directory, split)
    if saved is not None:
        if name is not None:
            raise DatasetError(
                f"{directory}: a folder saved by `datasets.save_to_disk` has no configs; drop `name` ({name!r})"
            )
        return saved
    config = _card_config(directory, name)
    if config is not None:
        return _config_files(directory, config, split)
    if name is not None:
        if not (directory / name).is_dir():
            raise DatasetError(f"{directory}: no subdirectory {name!r} for dataset name {name!r}")
        return split_files(directory / name, split, None)
    return _inferred_files(directory, split)


def _saved_dataset_files(directory: Path, split: str) -> list[Path] | None:
    """The .arrow shards of a folder saved by `save_to_disk`; None for any other folder."""
    if (directory / "dataset_dict.json").is_file():
        splits = _json_file(directory / "dataset_dict.json").get("splits") or []
        if split not in splits:
            raise DatasetError(f"{directory}: no split {split!r}; available splits: {list(splits)}")
        directory = directory / split
    elif not (directory / "state.json").is_file():
        return None
    shards = _json_file(directory / "state.json").get("_data_files") or []
    return [directory / shard["filename"] for shard in shards]


def _json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DatasetError(f"{path}: not a readable `datasets` metadata file: {err}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: not a `datasets` metadata file (expected a JSON object)")
    return data


def _card_config(directory: Path, name: str | None) -> dict[str, Any] | None:
    """The config chosen from the dataset card's YAML `configs`; None without a card that lists any."""
    card = directory / "README.md"
    if not card.is_file():
        return None
    header = re.match(r"---[ \t]*\n(.*?)\n---[ \t]*(\n|$)", card.read_text(encoding="utf-8", errors="replace"), re.S)
    try:
        metadata = yaml.safe_load(header.group(1)) if header else None
    except yaml.YAMLError as err:
        raise DatasetError(f"{card}: the YAML header does not parse: {str(err).splitlines()[0]}") from None
    configs = metadata.get("configs") if isinstance(metadata, dict) else None
    if not isinstance(configs, list) or not configs:
        return None
    names = [str(config.get("config_name", "default")) for config in configs]
    if name is None:
        defaults = [config for config in configs if config.get("default")] or (configs if len(configs) == 1 else [])
        defaults = defaults or [
            config for config, config_name in zip(configs, names, strict=True) if config_name == "default"
        ]
        if not defaults:
            raise DatasetError(
                f"{directory}: the dataset card lists configs {names} and none is the default; pick one with `name`"
            )
        return defaults[0]
    if name not in names:
        raise DatasetError(f"{directory}: no config {name!r} in the dataset card; its configs: {names}")
    return configs[names.index(name)]


def _config_files(directory: Path, config: dict[str, Any], split: str) -> list[Path]:
    """The files of `split` in one dataset-card config (`data_files` globs per split, or a `data_dir` to search)."""
    data_files = config.get("data_files")
    if data_files is None:
        return _inferred_files(directory / str(config.get("data_dir", ".")), split)
    if isinstance(data_files, str) or (
        isinstance(data_files, list) and all(isinstance(entry, str) for entry in data_files)
    ):
        patterns_by_split = {"train": data_files}
    elif isinstance(data_files, dict):
        patterns_by_split = data_files
    else:
        patterns_by_split = {
            str(entry.get("split", "train")): entry.get("path", []) for entry in data_files if isinstance(entry, dict)
        }
    patterns_by_split = {
        key: [value] if isinstance(value, str) else list(value) for key, value in patterns_by_split.items()
    }
    matching = [key for key in patterns_by_split if canonical_split(key) == canonical_split(split)]
    if not matching:
        raise DatasetError(
            f"{directory}: no split {split!r} in config {config.get('config_name', 'default')!r} of the "
            f"dataset card; splits found: {list(patterns_by_split)}"
        )
    base = directory / str(config.get("data_dir", "."))
    files = sorted(
        {
            Path(found)
            for pattern in patterns_by_split[matching[0]]
            for found in glob.glob(str(base / pattern), recursive=True)
            if os.path.isfile(found)
        }
    )
    if not files:
        raise DatasetError(
            f"{directory}: the dataset card's files for split {split!r} ({patterns_by_split[matching[0]]}) "
            "match nothing"
        )
    return files


def _inferred_files(directory: Path, split: str) -> list[Path]:
    """The files whose paths name `split` (see the module docstring); every file when none names a split."""
    files = _data_files(directory)
    if not files:
        raise DatasetError(
            f"{directory}: no {'/'.join(SUPPORTED_SUFFIXES)} files in this directory (searched "
            f"{MAX_SEARCH_DEPTH} folders deep)"
        )
    splits = {file: _split_of(file.relative_to(directory)) for file in files}
    if all(found is None for found in splits.values()):
        if canonical_split(split) == "train":
            return files
        raise DatasetError(
            f"{directory}: no split {split!r}: no file or folder name marks a split, so every file is the 'train' split"
        )
    wanted = canonical_split(split)
    matching = [file for file, found in splits.items() if found == wanted]
    if not matching:
        others = [file.relative_to(directory).as_posix() for file, found in splits.items() if found is not None]
        shown = others if len(others) <= 5 else [*others[:5], f"... {len(others) - 5} more"]
        found_splits = sorted({found for found in splits.values() if found is not None}, key=_split_order)
        raise DatasetError(
            f"{directory}: no file for split {split!r}; files of other splits: {shown}; splits found: {found_splits}"
        )
    return matching


def _split_order(split: str) -> tuple[int, str]:
    order = list(SPLIT_KEYWORDS)
    return (order.index(split) if split in order else len(order), split)


def _split_of(relative: Path) -> str | None:
    """The split a file's path names: a shard's prefix, else a folder's name, else the file's name; None if none."""
    shard = _SHARD.match(relative.name)
    if shard:
        return canonical_split(shard.group("split"))
    for split, keywords in SPLIT_KEYWORDS.items():
        if any(_names(folder, keywords, folder=True) for folder in relative.parent.parts):
            return split
    for split, keywords in SPLIT_KEYWORDS.items():
        if _names(relative.name, keywords, folder=False):
            return split
    return None


def _names(part: str, keywords: tuple[str, ...], folder: bool) -> bool:
    """Whether a folder or file name holds a keyword between separators (a file's keyword is followed by one)."""
    end = "([{0}]|$)" if folder else "[{0}]"
    return any(re.search(("(^|[{0}])" + keyword + end).format(SEPARATORS), part.lower()) for keyword in keywords)


def _data_files(directory: Path) -> list[Path]:
    """The data files in `directory` and up to MAX_SEARCH_DEPTH folders below it, hidden and metadata ones left out,
    sorted."""
    files: list[Path] = []
    entries = 0
    folders = [(directory, 0)]
    while folders:
        folder, depth = folders.pop()
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    entries += 1
                    if entries > MAX_SEARCH_ENTRIES:
                        raise DatasetError(
                            f"{directory}: more than {MAX_SEARCH_ENTRIES} files and folders, so not a "
                            "dataset directory; give the dataset's own folder or file"
                        )
                    if entry.name.startswith(".") or entry.name in NOT_DATA_FILES:
                        continue
                    if entry.is_dir():
                        if depth < MAX_SEARCH_DEPTH:
                            folders.append((Path(entry.path), depth + 1))
                    elif Path(entry.name).suffix in SUPPORTED_SUFFIXES:
                        files.append(Path(entry.path))
        except OSError as err:
            raise DatasetError(f"{folder}: cannot list the folder: {err.strerror}") from None
    return sorted(files)
