"""Reading a prompt back: the values a `str.format` template put into a message.

Scripted baselines play from the conversation the workflow sends, as a player
would. `read_template(RULES, text)` recovers the fields a game's own prompt
template filled in (the range of guess the number, the candidate words of
twenty questions), so a baseline reads the prompt through the same constant
the game writes it with, and a change of wording cannot leave them out of step.
"""

from __future__ import annotations

import re
import string


def read_template(template: str, text: str) -> dict[str, str] | None:
    """The fields `template.format(...)` filled in where it occurs in `text`, or None when it does not occur."""
    pattern, seen = "", set()
    parts = list(string.Formatter().parse(template))
    for index, (literal, field, _spec, _conversion) in enumerate(parts):
        pattern += re.escape(literal)
        if field is None:
            continue
        if not field.isidentifier():
            raise ValueError(f"template field {field!r} is not a plain name; only {{name}} fields can be read back")
        if field in seen:
            pattern += f"(?P={field})"
            continue
        seen.add(field)
        last = index == len(parts) - 1
        pattern += f"(?P<{field}>[^\\n]+)" if last else f"(?P<{field}>.+?)"
    match = re.search(pattern, text, re.DOTALL)
    return match.groupdict() if match else None
