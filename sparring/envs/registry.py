"""The game registry: a packaged game by its name, so `sparring train guess_number` needs no YAML path.

Every game is a folder `sparring/envs/<name>/` that holds the same parts:
its workflow, rules, baselines, `make_tasks(split, count, seed)` (the task
contract of `envs.common.tasks`), its default job (`config.yaml`) and its
data files (`data/`). The registry lists the names and finds those parts.
A game's default config reads its dataset paths relative to the game's
folder, so it runs from any directory and from a non-editable install;
`load_config` is what the command line calls with a name or a YAML path.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..trainer import ConfigError, TuneConfig, load_config_file

if TYPE_CHECKING:  # the games' shared code imports the whole framework; the config check must not
    from .common import TaskMaker

GAMES = ("debate", "debate_duel", "guess_number", "tictactoe", "twenty_questions", "werewolf")
"""The packaged games: each is the subpackage `sparring.envs.<name>`."""


class UnknownGameError(ConfigError):
    """A name given in place of a config file is neither a file nor a packaged game."""


def known_game(name: str) -> str:
    """`name` when it is a packaged game; UnknownGameError listing the known games otherwise."""
    if name not in GAMES:
        raise UnknownGameError(
            f"unknown game {name!r}; known games: {', '.join(GAMES)} (or give a YAML config file's path)"
        )
    return name


def game_folder(name: str) -> Path:
    """The folder of game `name` (its package directory, where its config.yaml and data/ are)."""
    return Path(__file__).resolve().parent / known_game(name)


def game_config_path(name: str) -> Path:
    """The default job config of game `name`."""
    return game_folder(name) / "config.yaml"


def load_game_config(name: str, overrides: Sequence[str] = ()) -> TuneConfig:
    """Game `name`'s default config with ``--set`` overrides applied, its dataset paths read from the game's folder."""
    return load_config_file(game_config_path(name), overrides, dataset_root=game_folder(name))


def task_maker(name: str) -> TaskMaker:
    """Game `name`'s `make_tasks(split, count, seed)`."""
    return importlib.import_module(f"{__package__}.{known_game(name)}").make_tasks


def load_config(name_or_path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> TuneConfig:
    """A job config from a YAML file's path, or from a game's name (its default config).

    An existing file wins; a bare name (no folder, no suffix) that is no file names a game; anything
    else is read as a path, relative to the working directory, as always.
    """
    path = Path(name_or_path)
    if path.is_file() or len(path.parts) != 1 or path.suffix:
        return load_config_file(path, overrides)
    return load_game_config(str(name_or_path), overrides)
