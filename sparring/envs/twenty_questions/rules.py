"""Twenty questions' rules: the prompts, the referee that reads the player's replies, the word list, the score.

The referee is Python: `classify` reads a reply as a guess of a listed word,
a question for the answerer, or neither; `normalise_answer` reads the
answerer's reply as Yes / No / Unknown (a local answerer is constrained to
exactly "Yes" or "No"; an endpoint that ignores the constraint is read
leniently); `score` turns a game into its reward and metrics. `load_words` reads the packaged word list
(`data/words.txt`: a train and an eval section, so held-out words are never
trained on).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from ..common import check_split

SYSTEM = "You guess a secret word by asking yes/no questions. Reply with one question. To guess, ask: Is it a <word>?"
RULES = "The secret word is a common object, animal, food or place. You have {max_questions} questions."
CANDIDATES = " It is one of: {words}."
FIRST = " Ask your first yes/no question, for example: Is it an animal?"
ANSWERER = "{question} Answer Yes or No."
"""The answerer's prompt; the question names the secret word in place of "it" (see `answerer_prompt`)."""
ABOUT = "About {subject}: {question}"
"""The question for the answerer when it has no "it" to put the word in."""
FINAL = " No questions left. Which word is it?"
"""The last request when the questions ran out: the final guess, constrained to the candidates (`choices=`)."""
FINAL_CHOICES = " Reply with one of: {words}."
"""Follows FINAL when candidates were shown."""
ANSWER_CHOICES = ["yes", "no"]
"""The answerer's choices: lower case, because SmolLM2-135M constrained to "Yes" / "No" says No to 96 % of the
hand-labelled sample (accuracy 0.54) and to "yes" / "no" answers 0.74 of it correctly
(benchmarks/answerer_accuracy.py)."""

_GUESS = re.compile(
    r"\b(?:guess(?:\s+is)?|is\s+it|it\s+is|it's|answer(?:\s+is)?)\s*[:\-]?\s*(?:(?:a|an|the)\s+)?([a-z]+)",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z]+", re.IGNORECASE)
_QUESTION_START = {
    "is",
    "are",
    "does",
    "do",
    "did",
    "can",
    "could",
    "will",
    "would",
    "was",
    "were",
    "has",
    "have",
    "should",
    "may",
}
_IT = re.compile(r"\b(?:it|the secret word)\b", re.IGNORECASE)
_YES = {"yes", "yeah", "yep", "yup", "correct", "true"}
_NO = {"no", "nope", "false", "incorrect"}


@dataclass
class Turn:
    """One reply of the player and what came of it."""

    text: str
    """The player's reply, as sampled."""
    kind: Literal["question", "guess", "invalid"]
    """How the referee read it: a question for the answerer, a guess of one listed word, or neither."""
    guess: str | None = None
    """The word guessed, for a guess."""
    answer: Literal["Yes", "No", "Unknown"] | None = None
    """What the player was told (None for an invalid reply)."""
    final: bool = False
    """The constrained final guess asked for once the questions ran out (not one of the questions)."""


@functools.cache
def load_words(split: Literal["train", "eval"]) -> tuple[str, ...]:
    """The packaged secret words of one split (train: 200 words, eval: 100 held-out words)."""
    check_split(split)
    sections: dict[str, list[str]] = {}
    current = None
    text = resources.files(__package__).joinpath("data/words.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
        elif current is not None:
            current.append(line.lower())
    return tuple(sections[split])


@functools.cache
def vocabulary() -> frozenset[str]:
    """Every packaged word: a reply naming one of them is a guess."""
    return frozenset(load_words("train") + load_words("eval"))


def _listed(word: str, words: frozenset[str]) -> str | None:
    """`word` as it appears in `words`, allowing a plural ending."""
    word = word.lower()
    for candidate in (word, word[:-1] if word.endswith("s") else None, word[:-2] if word.endswith("es") else None):
        if candidate and candidate in words:
            return candidate
    return None


def classify(text: str, words: frozenset[str]) -> tuple[Literal["question", "guess", "invalid"], str | None]:
    """Read a reply as a guess of one of `words`, a yes/no question, or neither."""
    for match in _GUESS.finditer(text):
        guessed = _listed(match.group(1), words)
        if guessed:
            return "guess", guessed
    tokens = _WORD.findall(text)
    if 1 <= len(tokens) <= 2 and (guessed := _listed(tokens[-1], words)):
        return "guess", guessed  # a bare word ("Cat.") is a guess
    if "?" in text or (tokens and tokens[0].lower() in _QUESTION_START):
        return "question", None
    return "invalid", None


def answerer_prompt(secret: str, question: str) -> str:
    """What the answerer is asked: the question with the secret word in place of its first "it" ("Is it an animal?"
    becomes "Is a panda an animal?"), which a small model answers far better than a question about "it"."""
    subject = f"{'an' if secret[:1] in 'aeiou' else 'a'} {secret}"
    question = question.strip()
    match = _IT.search(question)
    if match is None:
        return ANSWERER.format(question=ABOUT.format(subject=subject, question=question))
    named = subject.capitalize() if match.start() == 0 else subject
    return ANSWERER.format(question=question[: match.start()] + named + question[match.end() :])


def normalise_answer(text: str) -> Literal["Yes", "No", "Unknown"]:
    """The first yes- or no-word of the answerer's reply; Unknown when it has neither."""
    for token in _WORD.findall(text.lower()):
        if token in _YES:
            return "Yes"
        if token in _NO:
            return "No"
    return "Unknown"


def score(
    turns: list[Turn],
    secret: str,
    max_questions: int,
    question_bonus: float,
    candidates: Sequence[str] = (),
    guess_bonus: float = 0.0,
) -> dict[str, float]:
    """Reward and metrics of a finished game: `question_bonus` is spread over valid questions, `guess_bonus` over the
    shown `candidates` ruled out by a wrong guess (each once)."""
    solved = bool(turns) and turns[-1].kind == "guess" and turns[-1].guess == secret
    asked = [t for t in turns if not t.final]
    questions = [t for t in asked if t.kind == "question"]
    ruled_out = {t.guess for t in asked if t.kind == "guess" and t.guess != secret and t.guess in candidates}
    reward = (1.0 + 0.5 * (max_questions - len(asked)) / max_questions) if solved else 0.0
    metrics = {
        "reward": reward
        + question_bonus * len(questions) / max_questions
        + guess_bonus * len(ruled_out) / max_questions,
        "candidates_ruled_out": float(len(ruled_out)),
        "success": float(solved),
        "solved_before_final_guess": float(solved and not turns[-1].final),
        "questions": float(len(asked)),
        "valid_questions": float(len(questions)),
        "wrong_guesses": float(sum(t.kind == "guess" and t.guess != secret for t in turns)),
        "invalid_action_rate": sum(t.kind == "invalid" for t in asked) / max(len(asked), 1),
    }
    if questions:
        metrics["unknown_answer_rate"] = sum(t.answer == "Unknown" for t in questions) / len(questions)
    return metrics
