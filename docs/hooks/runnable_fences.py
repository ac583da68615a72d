"""MkDocs hook: a `python runnable` code block (one that `make test` runs, docs/contributing.md) renders as `python`.

The fence parser (pymdownx.superfences) reads the word after the language as a malformed option and would
show the block as plain text; the site has no use for the marker, so it is dropped before rendering.
"""

from __future__ import annotations

import re

RUNNABLE_FENCE = re.compile(r"^(?P<fence>[ \t]*(?:`{3,}|~{3,})[ \t]*python)[ \t]+runnable[ \t]*$", re.MULTILINE)
"""The opening line of a runnable block; the same pattern tests/test_docs.py runs blocks by."""


def on_page_markdown(markdown, page, config, files):
    return RUNNABLE_FENCE.sub(r"\g<fence>", markdown)
