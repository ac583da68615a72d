"""Twenty questions: the policy asks yes/no questions, a frozen LLM that knows the secret word answers.

The step up from guess the number: the counterpart is a second LLM (an
auxiliary model, `auxiliary_models["answerer"]` -- the base model in the
example config, or any OpenAI-compatible endpoint via `base_url`), logged but
never trained. Each question is a turn of the player's one conversation, so
the whole game trains as one merged sequence.

A `Turn` is one reply of the player, classified by the referee (`rules.py`,
not the answerer): a *guess* names one word of the word list ("Is it a cat?",
"Guess: cat"), a *question* is anything else that asks something, and
anything else is *invalid* (counted in `invalid_action_rate`, no answerer
call). Guesses are checked in Python, so a game is won only by naming the
secret word. Questions go to the answerer, with the secret word in place of
"it" (`rules.answerer_prompt`), constrained to reply exactly "yes" or "no"
(`choices=`; an OpenAI-compatible endpoint gets vLLM's
`guided_choice`, and a reply that ignored it is read leniently as Yes / No /
Unknown). When the questions run out unsolved, the player makes one final
guess constrained to the candidate words (`choices=`; every word of the list
in the classic game), so the game always ends on a valid guess.

Reward: 1 for a correct guess plus up to 0.5 for finding it in fewer
questions (a correct final guess, after all the questions, earns 1), a
small shaping of `question_bonus` spread over valid questions, and of
`guess_bonus` (0 unless set) spread over the shown candidates that a wrong
guess rules out, each once: the one answer the referee knows to be true,
where a 135M answerer's yes/no is right about 0.6-0.7 of the time. The word list
ships with the package (`data/words.txt` in this folder) with a fixed train /
eval split, so the held-out words are never seen in training.
`workflow_args` (`TwentyQuestionsArgs`): `max_questions` (default 20), `candidates` (show the player
that many possible words, the secret among them; 0 = none, the classic game;
small models need a few), `answer_tokens`, `question_bonus`, `guess_bonus`,
`answerer` (the auxiliary model's name).

    sparring train twenty_questions        # this folder's config.yaml
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field

from sparring import ChatModel, WorkflowArgs, WorkflowOutput, takes_args

from .rules import (
    ANSWER_CHOICES,
    CANDIDATES,
    FINAL,
    FINAL_CHOICES,
    FIRST,
    RULES,
    SYSTEM,
    Turn,
    answerer_prompt,
    classify,
    load_words,
    normalise_answer,
    score,
    vocabulary,
)

FINAL_GUESS_TOKENS = 16
"""Room for the longest word's tokens and the end of the turn."""


class TwentyQuestionsArgs(WorkflowArgs):
    """The game's `workflow_args`."""

    max_questions: int = Field(20, ge=1)
    """Questions (and guesses) before the final, constrained guess."""
    candidates: int = Field(0, ge=0)
    """Show the player this many possible words, the secret among them; 0 shows none (the classic game); small
    models need a few."""
    answer_tokens: int = Field(4, ge=1)
    """The answerer's reply budget: room for "yes" or "no" and the end of the turn."""
    question_bonus: float = 0.1
    """Shaping spread over the valid questions."""
    guess_bonus: float = 0.0
    """Shaping spread over the shown candidates a wrong guess rules out, each once (0: off)."""
    answerer: str = "answerer"
    """The name of the frozen auxiliary model that answers."""
    split: Literal["train", "eval"] = "train"
    """The word list a task without a `word` draws its secret from."""


def _answerer(auxiliary_models: dict[str, ChatModel], name: str) -> ChatModel:
    if name not in auxiliary_models:
        raise KeyError(
            f"twenty_questions needs a frozen answerer model auxiliary_models[{name!r}] (have "
            f"{sorted(auxiliary_models)}); "
            f"e.g. in YAML: auxiliary_models: {{{name}: {{model_path: smollm2-135m-instruct}}}}"
        )
    return auxiliary_models[name].as_agent("answerer", "answerer")


def _candidates(secret: str, count: int, rng: random.Random) -> list[str]:
    """`count` words of the secret's own split, the secret among them, in random order."""
    pool = [w for w in (load_words("eval") if secret in load_words("eval") else load_words("train")) if w != secret]
    chosen = [secret, *rng.sample(pool, min(count - 1, len(pool)))]
    rng.shuffle(chosen)
    return chosen


async def _final_guess(model: ChatModel, history: list[dict], choices: list[str], secret: str) -> Turn:
    """The guess once the questions ran out, constrained to `choices`; a reply outside them (an endpoint that
    ignored the constraint) is read by the referee like any reply."""
    reply = await model(history, choices=choices, max_tokens=FINAL_GUESS_TOKENS)
    text = reply.content.strip().lower()
    kind, guess = ("guess", text) if text in choices else classify(reply.content, frozenset(choices))
    turn = Turn(reply.content, "guess" if kind == "guess" else "invalid", guess, final=True)
    turn.answer = None if guess is None else ("Yes" if guess == secret else "No")
    return turn


@takes_args(TwentyQuestionsArgs)
async def twenty_questions(task: dict, model: ChatModel, auxiliary_models: dict[str, ChatModel]) -> WorkflowOutput:
    args = TwentyQuestionsArgs.of(task)
    max_questions, answer_tokens = args.max_questions, args.answer_tokens
    answerer = _answerer(auxiliary_models, args.answerer)
    rng = random.Random(f"{task.get('seed', 0)}:{task.get('word', '')}")
    secret = str(task["word"]).lower() if "word" in task else rng.choice(load_words(args.split))
    words = vocabulary() | {secret}
    shown = _candidates(secret, args.candidates, rng) if args.candidates > 0 else []
    prompt = RULES.format(max_questions=max_questions) + (CANDIDATES.format(words=", ".join(shown)) if shown else "")
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
                [{"role": "user", "content": answerer_prompt(secret, reply.content)}],
                choices=ANSWER_CHOICES,
                max_tokens=answer_tokens,
            )
            turn.answer = normalise_answer(answered.content)
        if turn.answer == "Yes" and kind == "guess":
            break
        left = max_questions - len(turns)
        feedback = {"Yes": "Yes.", "No": "No.", "Unknown": "I don't know.", None: "That is not a yes/no question."}[
            turn.answer
        ]
        if left:
            feedback += f" {left} question{'' if left == 1 else 's'} left."
        else:
            feedback += FINAL + (FINAL_CHOICES.format(words=", ".join(shown)) if shown else "")
        history += [reply.message, {"role": "user", "content": feedback}]
    if not (turns[-1].kind == "guess" and turns[-1].answer == "Yes"):
        turns.append(await _final_guess(model, history, shown or sorted(words), secret))
    metrics = score(turns, secret, max_questions, args.question_bonus, shown, args.guess_bonus)
    return WorkflowOutput(reward=metrics.pop("reward"), metrics=metrics, response=[(t.text, t.answer) for t in turns])
