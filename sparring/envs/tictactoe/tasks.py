"""Tic-tac-toe's tasks: game seeds drawn from a seed, sides alternating (the `make_tasks` contract of `envs.common.tasks`)."""

from __future__ import annotations

import random

from ..common import check_split
from .workflow import SEATS


def make_tasks(split: str, count: int, seed: int) -> list[dict]:
    """`count` games with seeds drawn from `seed`; the policy's side alternates X, O, X, ...; `split` is checked, the seed decides.

    The shipped files: data/train.jsonl is make_tasks("train", 256, seed=1), data/eval.jsonl make_tasks("eval", 200, seed=2),
    data/league.jsonl make_tasks("train", 255, seed=4) with workflow_args.opponent cycling snapshot, random, minimax.
    """
    check_split(split)
    rng = random.Random(seed)
    return [{"task_id": f"{seed}-{i}", "seed": rng.randrange(2**31), "side": SEATS[i % 2]} for i in range(count)]
