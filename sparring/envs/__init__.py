"""Games and scenarios written as plain workflows on the public API, one folder per game, found by name; `new_game`
scaffolds one of one's own."""

from .registry import (
    GAMES,
    UnknownGameError,
    game_config_path,
    game_folder,
    known_game,
    load_config,
    load_game_config,
    task_maker,
)
from .scaffold import new_game

__all__ = [
    "GAMES",
    "UnknownGameError",
    "game_config_path",
    "game_folder",
    "known_game",
    "load_config",
    "load_game_config",
    "new_game",
    "task_maker",
]
