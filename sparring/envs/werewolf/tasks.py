"""Werewolf's tasks: one game per seed, the seed dealing the roles (the `make_tasks` contract of
`envs.common.tasks`)."""

from __future__ import annotations

from ..common import check_split


def make_tasks(split: str, count: int, seed: int) -> list[dict]:
    """One game per seed: `seed`, `seed` + 1, ...; `split` is checked, the seed decides.

    The shipped files: data/train.jsonl is make_tasks("train", 200, seed=0), data/eval.jsonl make_tasks("eval", 200,
    seed=100_000).
    """
    check_split(split)
    return [{"task_id": f"werewolf-{game}", "seed": game} for game in range(seed, seed + count)]
