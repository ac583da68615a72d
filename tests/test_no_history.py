"""The product states what holds now: no tracked file narrates the project's history by session number
(issue 68). Dated measurements belong in benchmarks/ and the lab log dev/LOG.md, by date."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORY = re.compile(r"[Ss]ession [0-9]+")


def history_lines(paths: list[Path]) -> list[str]:
    """`path:line: text` for every line of the text files among `paths` that matches HISTORY (binary files skipped)."""
    found = []
    for path in paths:
        data = path.read_bytes()
        if b"\0" in data:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if HISTORY.search(line):
                found.append(f"{path}:{number}: {line.strip()[:120]}")
    return found


def tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def test_the_check_finds_a_session_number(tmp_path):
    # The number is formatted in at run time, so this file does not match the pattern itself.
    (tmp_path / "notes.md").write_text(f"Measured in session {12}, on a quiet host.\n")
    (tmp_path / "clean.md").write_text("Measured on 2026-12-07, on a quiet host; a session of play.\n")
    (tmp_path / "blob.bin").write_bytes(b"\0Session " + b"3\0")
    assert history_lines([tmp_path / "notes.md", tmp_path / "clean.md", tmp_path / "blob.bin"]) == [
        f"{tmp_path / 'notes.md'}:1: Measured in session {12}, on a quiet host."
    ]


def test_no_tracked_file_names_a_session():
    files = tracked_files()
    assert len(files) > 50, "git ls-files listed almost nothing"
    found = history_lines(files)
    assert not found, (
        "tracked files narrate history by session number (state what holds now, or a date):\n" + "\n".join(found)
    )


def test_packaged_configs_have_short_headers():
    """A packaged config opens with what the game is and how to run it (at most 15 comment lines), not a history."""
    configs = sorted((ROOT / "sparring" / "envs").glob("*/config.yaml"))
    assert configs, "no packaged config found"
    for config in configs:
        lines = config.read_text().splitlines()
        header = next(index for index, line in enumerate(lines) if line.strip() and not line.startswith("#"))
        assert header <= 15, f"{config.relative_to(ROOT)} opens with {header} comment lines (at most 15)"
