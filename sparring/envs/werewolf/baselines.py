"""Werewolf's baseline: a scripted player for the trained side (`baselines:` in a config).

`random_valid` is a `ScriptedPolicy` (`policy(messages, rng) -> reply`, see
`ScriptedChatModel`): it reads the request the game sends and answers with a
random allowed choice, or a fixed speech.
"""

from __future__ import annotations

import random
import re

_ONE_NAME = re.compile(r"Reply with one name: ([^\n]*)")
_PLAYER = re.compile(r"Player\d+")
BASELINE_SPEECH = "I am not sure yet; let us watch the votes."


def random_valid(messages: list[dict], rng: random.Random) -> str:
    """Baseline: a uniformly random allowed name for every kill, check and vote; a random allowed witch action; a fixed speech.

    It reads the request the game sends (the last user message): the names after "Reply with one name:",
    the witch's SAVE / POISON / PASS options, or a call to speak.
    """
    request = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
    last_line = request.splitlines()[-1] if request else ""
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
