"""Debate's rules: the prompts, and how the judge's verdict is asked for, read and decided.

`argue` runs the speeches of one debate (each side keeping its own
conversation); `judge_debate` asks the frozen judge in one or both speaking
orders and decides the winner (or a tie) from its votes; `parse_verdict` reads a vote,
`speaking_order` fixes who is Speaker 1 from a hash of the arguments;
`speech_fault` is the check a speech passes before any judge reads it (on the
motion's subject, not the motion quoted back, not one line over and over), so a
small judge's taste for a stock phrase or an echo cannot be what a debater
learns. The workflow (`workflow.py`) runs the rounds and turns the verdict into
rewards.
"""

from __future__ import annotations

import hashlib
import re

from sparring import ChatModel

SIDES = ("pro", "con")
STANCE = {"pro": "for", "con": "against"}
DEBATER_SYSTEM = 'You are a debater arguing {stance} the motion: "{topic}". Answer in one or two short sentences.'
OPENING = "Give your opening argument {stance} the motion."
REPLY = 'Your opponent said: "{said}"\nAnswer it and argue {stance} the motion.'
JUDGE_SYSTEM = "You are the judge of a debate. Reply with one number only: 1 or 2."
JUDGE_PROMPT = (
    'Motion: "{topic}"\n\nSpeaker 1 ({stance1} the motion):\n{speech1}\n\nSpeaker 2 ({stance2} the '
    "motion):\n{speech2}\n\nWhich speaker argued better? Answer 1 or 2."
)
# Without a worked example SmolLM2-135M names a speaker in about half its replies; with it, in all.
JUDGE_EXAMPLE = [
    {
        "role": "user",
        "content": JUDGE_PROMPT.format(
            topic="Cats are better pets than dogs.",
            stance1="for",
            speech1="Cats are quiet, clean and happy alone all day.",
            stance2="against",
            speech2="Dogs are nice.",
        ),
    },
    {"role": "assistant", "content": "1"},
]
_VERDICT = re.compile(r"[12]")
_WORD = re.compile(r"[a-z]+")
_LINE_END = re.compile(r"[\n.!?]+")
STEM_LETTERS = 4
"""Subject words have at least four letters, and two are the same when their first four agree ("schools" and
"school", "closed" and "closing")."""
_NOT_SUBJECT = frozenset(
    "should than more less that this with their they have been from into does will would could about over "
    "every what when which there".split()
)
"""Words long enough to be subject words that say nothing of a motion's subject."""
MIN_DISTINCT_WORD_SHARE = 0.5
"""Below this share of distinct words a speech says one thing over and over ("I'm ready. I'm ready. I'm here.")."""


async def argue(topic: str, speakers: dict[str, ChatModel], rounds: int) -> dict[str, list[str]]:
    """`rounds` rounds of speeches (pro, then con) on `topic`, each side answering the last speech: the speeches by
    side."""
    conversations = {
        side: [{"role": "system", "content": DEBATER_SYSTEM.format(stance=STANCE[side], topic=topic)}] for side in SIDES
    }
    arguments: dict[str, list[str]] = {side: [] for side in SIDES}
    last = None
    for _ in range(rounds):
        for side in SIDES:
            cue = OPENING if last is None else REPLY
            conversations[side].append({"role": "user", "content": cue.format(stance=STANCE[side], said=last)})
            reply = await speakers[side](list(conversations[side]))  # a copy: transcripts keep what was sent
            conversations[side].append(reply.message)
            last = reply.content.strip() or "(nothing)"
            arguments[side].append(last)
    return arguments


def speech_fault(topic: str, speeches: list[str]) -> str | None:
    """Why one side's speeches do not count as arguing the motion (`off_topic`: no word of the motion's subject;
    `restates`: the motion word for word; `repetitive`: a line said twice or under half its words distinct), or None
    when they do."""
    motion = _WORD.findall(topic.lower())
    subject = {word[:STEM_LETTERS] for word in motion if len(word) >= STEM_LETTERS and word not in _NOT_SUBJECT}
    words = _WORD.findall(" ".join(speeches).lower())
    if not subject & {word[:STEM_LETTERS] for word in words if len(word) >= STEM_LETTERS}:
        return "off_topic"
    if any(words[start : start + len(motion)] == motion for start in range(len(words) - len(motion) + 1)):
        return "restates"
    lines = [line.strip().lower() for speech in speeches for line in _LINE_END.split(speech) if line.strip()]
    if len(set(lines)) < len(lines) or len(set(words)) < MIN_DISTINCT_WORD_SHARE * len(words):
        return "repetitive"
    return None


def parse_verdict(text: str) -> int | None:
    """The first '1' or '2' in the judge's reply (the speaker it picked), or None."""
    match = _VERDICT.search(text)
    return int(match.group()) if match else None


def speaking_order(arguments: dict[str, list[str]]) -> tuple[str, str]:
    """The sides as Speaker 1 and Speaker 2: decided by a hash of the arguments, so it is unrelated to the side."""
    digest = hashlib.sha256("\x00".join(arguments["pro"] + ["\x01"] + arguments["con"]).encode()).digest()
    return SIDES if digest[0] % 2 == 0 else SIDES[::-1]


async def judge_debate(
    judge: ChatModel, topic: str, arguments: dict[str, list[str]], orders: int
) -> tuple[str | None, float]:
    """The winning side (None for a tie) and the fraction of the judge's replies that named no speaker."""
    first = speaking_order(arguments)
    votes: list[tuple[str, float | None]] = []  # (side, logprob of the reply) per parsable reply
    for order in [first, first[::-1]][:orders]:
        prompt = JUDGE_PROMPT.format(
            topic=topic,
            stance1=STANCE[order[0]],
            speech1="\n".join(arguments[order[0]]),
            stance2=STANCE[order[1]],
            speech2="\n".join(arguments[order[1]]),
        )
        reply = await judge(
            [{"role": "system", "content": JUDGE_SYSTEM}, *JUDGE_EXAMPLE, {"role": "user", "content": prompt}]
        )
        verdict = parse_verdict(reply.content)
        if verdict is not None:
            votes.append((order[verdict - 1], sum(reply.logprobs) if reply.logprobs else None))
    unparsable = 1.0 - len(votes) / orders
    if len({side for side, _ in votes}) == 1:
        return votes[0][0], unparsable
    if len(votes) == 2 and None not in (votes[0][1], votes[1][1]) and votes[0][1] != votes[1][1]:
        return max(votes, key=lambda vote: vote[1])[0], unparsable
    return None, unparsable
