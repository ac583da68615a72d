"""Twenty questions: the policy asks yes/no questions, a frozen LLM that knows the secret word answers.

The step up from guess the number: the counterpart is a second LLM (an
auxiliary model, `auxiliary_models["answerer"]` -- the base model in the
example config, or any OpenAI-compatible endpoint via `base_url`), logged but
never trained. Each question is a turn of the player's one conversation, so
the whole game trains as one merged sequence.

A `Turn` is one reply of the player, classified by the referee (this file,
not the answerer): a *guess* names one word of the word list ("Is it a cat?",
"Guess: cat"), a *question* is anything else that asks something, and
anything else is *invalid* (counted in `invalid_action_rate`, no answerer
call). Guesses are checked in Python, so a game is won only by naming the
secret word; questions go to the answerer, whose free-text reply is read
leniently as Yes / No / Unknown.

Reward: 1 for a correct guess plus up to 0.5 for finding it in fewer
questions, and a small shaping of `question_bonus` spread over valid
questions. The word list ships with the package
(`data/twenty_questions_words.txt`) with a fixed train / eval split, so the
held-out words are never seen in training. `workflow_args`: `max_questions`
(default 20), `candidates` (show the player that many possible words, the
secret among them; 0 = none, the classic game; small models need a few),
`answer_tokens`, `question_bonus`, `answerer` (the auxiliary model's name).

    sparring train examples/twenty_questions.yaml
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from sparring import ChatModel, WorkflowOutput

from .templates import read_template

SYSTEM = "You guess a secret word by asking yes/no questions. Reply with one question. To guess, ask: Is it a <word>?"
RULES = "The secret word is a common object, animal, food or place. You have {max_questions} questions."
CANDIDATES = " It is one of: {words}."
FIRST = " Ask your first yes/no question, for example: Is it an animal?"
ANSWERER = "Question about {word}: {question} Answer Yes or No."

_GUESS = re.compile(r"\b(?:guess(?:\s+is)?|is\s+it|it\s+is|it's|answer(?:\s+is)?)\s*[:\-]?\s*(?:(?:a|an|the)\s+)?([a-z]+)", re.IGNORECASE)
_WORD = re.compile(r"[a-z]+", re.IGNORECASE)
_QUESTION_START = {"is", "are", "does", "do", "did", "can", "could", "will", "would", "was", "were", "has", "have", "should", "may"}
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


@functools.cache
def load_words(split: Literal["train", "eval"]) -> tuple[str, ...]:
    """The packaged secret words of one split (train: 200 words, eval: 100 held-out words)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    sections: dict[str, list[str]] = {}
    current = None
    text = resources.files("sparring.envs").joinpath("data/twenty_questions_words.txt").read_text(encoding="utf-8")
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


def normalise_answer(text: str) -> Literal["Yes", "No", "Unknown"]:
    """The first yes- or no-word of the answerer's reply; Unknown when it has neither."""
    for token in _WORD.findall(text.lower()):
        if token in _YES:
            return "Yes"
        if token in _NO:
            return "No"
    return "Unknown"


def score(turns: list[Turn], secret: str, max_questions: int, question_bonus: float) -> dict[str, float]:
    """Reward and metrics of a finished game."""
    solved = bool(turns) and turns[-1].kind == "guess" and turns[-1].guess == secret
    questions = [t for t in turns if t.kind == "question"]
    reward = (1.0 + 0.5 * (max_questions - len(turns)) / max_questions) if solved else 0.0
    metrics = {
        "reward": reward + question_bonus * len(questions) / max_questions,
        "success": float(solved),
        "questions": float(len(turns)),
        "valid_questions": float(len(questions)),
        "wrong_guesses": float(sum(t.kind == "guess" and t.guess != secret for t in turns)),
        "invalid_action_rate": sum(t.kind == "invalid" for t in turns) / max(len(turns), 1),
    }
    if questions:
        metrics["unknown_answer_rate"] = sum(t.answer == "Unknown" for t in questions) / len(questions)
    return metrics


def _answerer(auxiliary_models: dict[str, ChatModel], name: str) -> ChatModel:
    if name not in auxiliary_models:
        raise KeyError(
            f"twenty_questions needs a frozen answerer model auxiliary_models[{name!r}] (have {sorted(auxiliary_models)}); "
            f"e.g. in YAML: auxiliary_models: {{{name}: {{model_path: smollm2-135m-instruct}}}}"
        )
    return auxiliary_models[name].as_agent("answerer", "answerer")


def _candidates(secret: str, count: int, rng: random.Random) -> list[str]:
    """`count` words of the secret's own split, the secret among them, in random order."""
    pool = [w for w in (load_words("eval") if secret in load_words("eval") else load_words("train")) if w != secret]
    chosen = [secret, *rng.sample(pool, min(count - 1, len(pool)))]
    rng.shuffle(chosen)
    return chosen


async def twenty_questions(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    args = task.get("workflow_args", {})
    max_questions = int(args.get("max_questions", 20))
    if max_questions < 1:
        raise ValueError(f"workflow_args.max_questions must be at least 1, got {max_questions}")
    answer_tokens = int(args.get("answer_tokens", 4))
    answerer = _answerer(auxiliary_models, str(args.get("answerer", "answerer")))
    rng = random.Random(f"{task.get('seed', 0)}:{task.get('word', '')}")
    secret = str(task["word"]).lower() if "word" in task else rng.choice(load_words(args.get("split", "train")))
    words = vocabulary() | {secret}
    prompt = RULES.format(max_questions=max_questions)
    if int(args.get("candidates", 0)) > 0:
        prompt += CANDIDATES.format(words=", ".join(_candidates(secret, int(args["candidates"]), rng)))
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt + FIRST}]
    turns: list[Turn] = []
    while len(turns) < max_questions:
        reply = await model(history)
        kind, guess = classify(reply.content, words)
        turn = Turn(reply.content, kind, guess)
        turns.append(turn)
        if kind == "guess":
            turn.answer = "Yes" if guess == secret else "No"
        elif kind == "question":
            answered = await answerer(
                [{"role": "user", "content": ANSWERER.format(word=secret, question=reply.content.strip())}],
                max_tokens=answer_tokens,
            )
            turn.answer = normalise_answer(answered.content)
        if turn.answer == "Yes" and kind == "guess":
            break
        left = max_questions - len(turns)
        feedback = {"Yes": "Yes.", "No": "No.", "Unknown": "I don't know.", None: "That is not a yes/no question."}[turn.answer]
        history += [reply.message, {"role": "user", "content": f"{feedback} {left} question{'' if left == 1 else 's'} left."}]
    metrics = score(turns, secret, max_questions, float(args.get("question_bonus", 0.1)))
    return WorkflowOutput(reward=metrics.pop("reward"), metrics=metrics, response=[(t.text, t.answer) for t in turns])


def make_tasks(split: Literal["train", "eval"], count: int, seed: int = 0) -> list[dict]:
    """`count` games on the words of `split`: every word once per pass, passes shuffled by `seed`."""
    rng = random.Random(seed)
    words: list[str] = []
    while len(words) < count:
        words += rng.sample(load_words(split), len(load_words(split)))
    return [{"task_id": f"tq-{split}-{i}", "seed": seed * 100_000 + i, "word": word} for i, word in enumerate(words[:count])]


# --- Baselines: scripted policies for the trainable slot (`baselines:` in a config; see ScriptedChatModel) ---

HALVING_QUESTION = "Is the secret word one of these: {words}?"
"""The halving asker's question: a set of words (no guess phrase, so the referee reads it as a question)."""
_FEEDBACK_WORDS = re.compile(r"^(yes|no)\b", re.IGNORECASE)


def _opening_words(messages: list[dict]) -> list[str]:
    """The candidate words the rules message lists, else every packaged word (the referee's vocabulary)."""
    for message in messages:
        found = read_template(CANDIDATES, message.get("content") or "")
        if found is not None and message.get("role") in ("user", "system"):
            return [word.strip().lower() for word in found["words"].split(",") if word.strip()]
    return sorted(vocabulary())


def halving_asker(messages: list[dict], rng: random.Random) -> str:
    """Baseline: ask whether the word is in one half of the words still possible; guess when one is left.

    It replays the conversation: a Yes keeps the half asked about, a No the other half, an "I don't know"
    keeps both (and the next question asks about the other half), a wrong guess drops that word. If noisy
    answers rule out every word, it starts again from the words it has not guessed wrongly.
    """
    opening = _opening_words(messages)
    words = frozenset(opening)
    candidates, wrong, unknowns = list(opening), set(), 0
    for asked, feedback in zip(messages, messages[1:]):
        if asked.get("role") != "assistant" or feedback.get("role") != "user":
            continue
        text, said = asked.get("content") or "", feedback.get("content") or ""
        answer = normalise_answer(said) if _FEEDBACK_WORDS.match(said.strip()) else "Unknown"
        subset = read_template(HALVING_QUESTION, text)
        if subset is not None:
            named = {word.strip().lower() for word in subset["words"].split(",")}
            if answer == "Unknown":
                unknowns += 1
            else:
                candidates = [w for w in candidates if (w in named) == (answer == "Yes")]
        else:
            kind, guess = classify(text, words)
            if kind == "guess" and answer == "No":
                wrong.add(guess)
                candidates = [w for w in candidates if w != guess]
    if not candidates:
        candidates = [w for w in opening if w not in wrong] or list(opening)
    if len(candidates) == 1:
        return f"Is it a {candidates[0]}?"
    half = len(candidates) // 2
    asked_about = candidates[:half] if unknowns % 2 == 0 else candidates[half:]
    return HALVING_QUESTION.format(words=", ".join(asked_about))


def membership_answerer(messages: list[dict], rng: random.Random) -> str:
    """A scripted answerer that answers the halving asker's questions and guesses truthfully (for tests and calibration).

    It reads the answerer prompt (ANSWERER): Yes when the secret word is among the words the question lists
    (or is the word it names), No otherwise, and "I don't know" for any other question.
    """
    prompt = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    found = read_template(ANSWERER, prompt)
    if found is None:
        raise ValueError(f"not an answerer prompt (ANSWERER): {prompt!r}")
    secret, question = found["word"].lower(), found["question"]
    subset = read_template(HALVING_QUESTION, question)
    if subset is not None:
        return "Yes" if secret in {word.strip().lower() for word in subset["words"].split(",")} else "No"
    kind, guess = classify(question, vocabulary() | {secret})
    if kind == "guess":
        return "Yes" if guess == secret else "No"
    return "I don't know"
