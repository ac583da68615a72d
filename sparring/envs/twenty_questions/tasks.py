"""Twenty questions' tasks: secret words of a split, in seeded order (the `make_tasks` contract of
`envs.common.tasks`)."""

from __future__ import annotations

import random

from .rules import load_words


def make_tasks(split: str, count: int, seed: int) -> list[dict]:
    """`count` games on the words of `split`: every word once per pass, passes shuffled by `seed`.

    The shipped files: data/train.jsonl is make_tasks("train", 200, seed=1), data/eval.jsonl make_tasks("eval", 200,
    seed=2) (each held-out word twice, with its own candidates).
    """
    rng = random.Random(seed)
    words: list[str] = []
    while len(words) < count:
        words += rng.sample(load_words(split), len(load_words(split)))
    return [
        {"task_id": f"tq-{split}-{i}", "seed": seed * 100_000 + i, "word": word} for i, word in enumerate(words[:count])
    ]
