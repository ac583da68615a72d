"""Guess the number's tasks: secret numbers drawn from a seed (the `make_tasks` contract of `envs.common.tasks`)."""

from __future__ import annotations

import random

from ..common import check_split


def make_tasks(split: str, count: int, seed: int, *, low: int = 1, high: int = 16) -> list[dict]:
    """`count` games with secrets from `low` to `high` drawn from `seed`; `split` is checked, the seed decides.

    The shipped files: data/train.jsonl is make_tasks("train", 128, seed=1), data/eval.jsonl make_tasks("eval", 100,
    seed=2).
    """
    check_split(split)
    rng = random.Random(seed)
    return [{"task_id": f"{seed}-{i}", "secret": rng.randint(low, high)} for i in range(count)]
