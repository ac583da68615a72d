"""Debate's tasks: motions of a split, in seeded order (the `make_tasks` contract of `envs.common.tasks`).

The motions are the packaged task files themselves (`data/train.jsonl`: 40
motions, `data/eval.jsonl`: 200 held-out ones, the first 100 those of the earlier results); `make_tasks`
draws from them.
"""

from __future__ import annotations

import functools
import json
import random
from importlib import resources

from ..common import check_split


@functools.cache
def load_motions(split: str) -> tuple[str, ...]:
    """The packaged motions of one split, in file order."""
    check_split(split)
    lines = resources.files(__package__).joinpath(f"data/{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return tuple(json.loads(line)["topic"] for line in lines if line.strip())


def make_tasks(split: str, count: int, seed: int) -> list[dict]:
    """`count` debates on the motions of `split`: every motion once per pass, passes shuffled by `seed`."""
    rng = random.Random(seed)
    motions: list[str] = []
    while len(motions) < count:
        motions += rng.sample(load_motions(split), len(load_motions(split)))
    return [{"task_id": f"debate-{split}-{i}", "topic": topic} for i, topic in enumerate(motions[:count])]
