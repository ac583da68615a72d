"""Werewolf's baselines: scripted players for the trained side (`baselines:` in a config).

Each is a `ScriptedPolicy` (`policy(messages, rng) -> reply`, see
`ScriptedChatModel`) that reads the request the game sends. `random_valid`
answers with a random allowed choice (what a policy that learned only the
format would do); `coordinated_werewolves` is the rule a werewolf pair can
win by when most votes are scattered: both kill and vote out the same good
player (what strategy, not format, is worth in this game).
"""

from __future__ import annotations

import random
import re

_ONE_NAME = re.compile(r"Reply with one name: ([^\n]*)")
_PLAYER = re.compile(r"Player\d+")
_MATE = re.compile(r"Your fellow werewolf is (Player\d+)")
BASELINE_SPEECH = "I am not sure yet; let us watch the votes."


def _request(messages: list[dict]) -> str:
    """The last line of the last user message: the request the game sends."""
    request = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    return request.splitlines()[-1] if request else ""


def random_valid(messages: list[dict], rng: random.Random) -> str:
    """Baseline: a uniformly random allowed name for every kill, check and vote; a random allowed witch action; a
    fixed speech.

    It reads the request the game sends (the last user message): the names after "Reply with one name:",
    the witch's SAVE / POISON / PASS options, or a call to speak.
    """
    last_line = _request(messages)
    if "Reply SAVE" in last_line or "Reply POISON" in last_line:
        options = ["PASS"]
        if "Reply SAVE" in last_line:
            options.append("SAVE")
        poison = re.search(r"Reply POISON and one name to kill: ([^\n]*)", last_line)
        if poison:
            options += [f"POISON {name}" for name in _PLAYER.findall(poison.group(1))]
        return rng.choice(options)
    named = _ONE_NAME.search(last_line)
    if named and _PLAYER.findall(named.group(1)):
        return rng.choice(_PLAYER.findall(named.group(1)))
    return BASELINE_SPEECH


def coordinated_werewolves(messages: list[dict], rng: random.Random) -> str:
    """Baseline for the werewolves: both kill, and vote out, the lowest-numbered living good player; a fixed speech.

    Both werewolves name the same player without talking (the first allowed name that is not the mate), so their
    two votes meet while the good side's scatter: a tie eliminates nobody, so two matching votes often decide the
    day. It reads the mate from the system prompt; in a good player's seat it votes the lowest-numbered other
    player (a bloc of one, no strategy), and the witch passes.
    """
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    mate = _MATE.search(system)
    last_line = _request(messages)
    if "Reply SAVE" in last_line or "Reply POISON" in last_line:
        return "PASS"
    named = _ONE_NAME.search(last_line)
    allowed = [name for name in _PLAYER.findall(named.group(1)) if not mate or name != mate.group(1)] if named else []
    return min(allowed, key=lambda name: int(name.removeprefix("Player"))) if allowed else BASELINE_SPEECH
