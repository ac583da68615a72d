"""Games and scenarios written as plain workflows on the public API, one folder per game, found by name."""

from .registry import GAMES, UnknownGameError, game_config_path, game_folder, known_game, load_config, load_game_config, task_maker

__all__ = ["GAMES", "UnknownGameError", "game_config_path", "game_folder", "known_game", "load_config", "load_game_config", "task_maker"]
