"""The task contract every game meets: `make_tasks(split, count, seed) -> list[dict]`.

A game's tasks are the dicts its workflow reads (a secret number, a game
seed, a secret word, a motion). One signature for every game lets a caller
(a test, a benchmark, a script writing a data file) make any game's tasks
the same way. `split` names the task set, 'train' or 'eval': games with a
fixed held-out list (twenty questions' words, debate's motions) draw from
that split's list; the others draw from `seed` alone, so their held-out
tasks come from a seed of their own (the shipped files use seed 1 for
train, 2 for eval). The same arguments always give the same tasks.
"""

from __future__ import annotations

from collections.abc import Callable

SPLITS = ("train", "eval")
TaskMaker = Callable[[str, int, int], list[dict]]
"""`make_tasks(split, count, seed)`: `count` tasks of `split`, drawn reproducibly from `seed`."""


def check_split(split: str) -> None:
    """ValueError unless `split` is one of SPLITS."""
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
