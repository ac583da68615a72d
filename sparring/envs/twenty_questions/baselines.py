"""Twenty questions' baselines: a scripted asker for the trainable slot, and a truthful scripted answerer.

`halving_asker` is a `ScriptedPolicy` (`policy(messages, rng) -> reply`, see
`ScriptedChatModel`) for `baselines:` in a config; `membership_answerer`
answers its questions truthfully (for tests and calibration; guesses are
refereed in Python and never reach an answerer). Both read the
conversation back through the rules' own templates.
"""

from __future__ import annotations

import random
import re

from ..common import read_template
from .rules import ANSWERER, CANDIDATES, FINAL, classify, normalise_answer, vocabulary

HALVING_QUESTION = "Is it one of these: {words}?"
"""The halving asker's question: a set of words (no guess phrase, so the referee reads it as a question)."""
HALVING_ASKED = "Is {subject} one of these: {words}?"
"""The halving question as the answerer sees it (`rules.answerer_prompt` names the secret word in place of "it")."""
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
    answers rule out every word, it starts again from the words it has not guessed wrongly. Asked for the
    final guess (FINAL), it names one of the words still possible, at random.
    """
    opening = _opening_words(messages)
    words = frozenset(opening)
    candidates, wrong, unknowns = list(opening), set(), 0
    for asked, feedback in zip(messages, messages[1:], strict=False):
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
    if FINAL in (messages[-1].get("content") or ""):
        return rng.choice(candidates)
    if len(candidates) == 1:
        return f"Is it a {candidates[0]}?"
    half = len(candidates) // 2
    asked_about = candidates[:half] if unknowns % 2 == 0 else candidates[half:]
    return HALVING_QUESTION.format(words=", ".join(asked_about))


def membership_answerer(messages: list[dict], rng: random.Random) -> str:
    """A scripted answerer that answers the halving asker's questions truthfully (for tests and calibration).

    It reads the answerer prompt (ANSWERER, the question naming the secret word): Yes when the secret word is
    among the words the question lists, No otherwise, and "I don't know" for any other question.
    """
    prompt = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    found = read_template(ANSWERER, prompt)
    if found is None:
        raise ValueError(f"not an answerer prompt (ANSWERER): {prompt!r}")
    subset = read_template(HALVING_ASKED, found["question"])
    if subset is None:
        return "I don't know"
    secret = subset["subject"].split()[-1].lower()
    return "Yes" if secret in {word.strip().lower() for word in subset["words"].split(",")} else "No"
