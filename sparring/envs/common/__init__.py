"""What the games share: the task contract, the two-player turn coordinator, reading a prompt template back."""

from .tasks import SPLITS, TaskMaker, check_split
from .templates import read_template
from .turns import Bot, GameRecord, Turn, TwoPlayerGame, play_game

__all__ = [
    "SPLITS",
    "Bot",
    "GameRecord",
    "TaskMaker",
    "Turn",
    "TwoPlayerGame",
    "check_split",
    "play_game",
    "read_template",
]
