"""How often twenty questions' frozen answerer answers correctly, asked exactly as the game asks it.

The game's answerer prompt (`rules.answerer_prompt`) and choices (`rules.ANSWER_CHOICES`), greedy
(the shipped config's temperature 0), on two sets:

- the 50 hand-labelled (word, question, answer) rows of
  `sparring/envs/twenty_questions/data/answerer_sample.jsonl` (held-out words;
  category, size and use questions; 25 Yes, 25 No);
- the halving asker's questions ("Is it one of these: ...?") on
  every held-out word, one question whose list holds the word and one whose
  list does not (4 words each, drawn from the held-out words), where the
  truth is known exactly.

    python benchmarks/answerer_accuracy.py [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from importlib import resources

from sparring import FrozenChatModel, ServiceClient
from sparring.envs.twenty_questions.baselines import HALVING_QUESTION
from sparring.envs.twenty_questions.rules import ANSWER_CHOICES, answerer_prompt, load_words, normalise_answer


def hand_labelled() -> list[dict]:
    """The 50 hand-labelled rows: word, question, answer (Yes / No)."""
    text = (
        resources.files("sparring.envs.twenty_questions")
        .joinpath("data/answerer_sample.jsonl")
        .read_text(encoding="utf-8")
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def halving_rows(seed: int = 0) -> list[dict]:
    """Per held-out word: one list of 4 held-out words holding it (answer Yes), one not holding it (No)."""
    rng, words = random.Random(seed), list(load_words("eval"))
    rows = []
    for word in words:
        others = rng.sample([w for w in words if w != word], 7)
        inside = [word, *others[:3]]
        rng.shuffle(inside)
        rows.append({"word": word, "question": HALVING_QUESTION.format(words=", ".join(inside)), "answer": "Yes"})
        rows.append({"word": word, "question": HALVING_QUESTION.format(words=", ".join(others[3:])), "answer": "No"})
    return rows


async def accuracy(answerer: FrozenChatModel, rows: list[dict]) -> tuple[float, float]:
    """(share of correct answers, share of Yes answers) over `rows`."""
    replies = await asyncio.gather(
        *(
            answerer(
                [{"role": "user", "content": answerer_prompt(row["word"], row["question"])}], choices=ANSWER_CHOICES
            )
            for row in rows
        )
    )
    said = [normalise_answer(reply.content) for reply in replies]
    return sum(s == row["answer"] for s, row in zip(said, rows, strict=True)) / len(rows), said.count("Yes") / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="the answerer's base model (catalogue name or path)"
    )
    model = parser.parse_args().model
    answerer = FrozenChatModel(
        ServiceClient().create_sampling_client(base_model=model), defaults={"temperature": 0.0, "max_tokens": 4}
    )
    for name, rows in (
        ("hand-labelled sample (50)", hand_labelled()),
        ("halving questions (2 per held-out word)", halving_rows()),
    ):
        correct, yes = asyncio.run(accuracy(answerer, rows))
        truth_yes = sum(row["answer"] == "Yes" for row in rows) / len(rows)
        print(f"{name}: accuracy {correct:.2f} over {len(rows)} (answered Yes {yes:.2f}; truly Yes {truth_yes:.2f})")


if __name__ == "__main__":
    main()
