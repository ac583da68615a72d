"""The debate duel's baseline: a scripted debater for the policy's seats (`baselines:` in a config).

`restate` says which side it argues and nothing else: what a speech without an argument wins against the frozen
opponent before that judge, the floor a trained speech has to clear.
"""

from __future__ import annotations

import random
import re

_SYSTEM = re.compile(r'arguing (for|against) the motion: "(.*)"')


def restate(messages: list[dict], rng: random.Random) -> str:
    """Baseline: 'I argue for (against) the motion: <motion>' and nothing more."""
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    match = _SYSTEM.search(system)
    if match is None:
        raise ValueError(f"no debater's brief (arguing for/against the motion) in the system message {system!r}")
    return f"I argue {match.group(1)} the motion: {match.group(2)}"
