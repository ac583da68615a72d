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
secret word; questions go to the answerer, whose free-text reply is read
leniently as Yes / No / Unknown.

Reward: 1 for a correct guess plus up to 0.5 for finding it in fewer
questions, and a small shaping of `question_bonus` spread over valid
questions. The word list ships with the package
(`data/words.txt` in this folder) with a fixed train / eval split, so the
held-out words are never seen in training. `workflow_args`: `max_questions`
(default 20), `candidates` (show the player that many possible words, the
secret among them; 0 = none, the classic game; small models need a few),
`answer_tokens`, `question_bonus`, `answerer` (the auxiliary model's name).

    sparring train twenty_questions        # this folder's config.yaml
"""

from __future__ import annotations

import random

from sparring import ChatModel, WorkflowOutput

from .rules import ANSWERER, CANDIDATES, FIRST, RULES, SYSTEM, Turn, classify, load_words, normalise_answer, score, vocabulary


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
