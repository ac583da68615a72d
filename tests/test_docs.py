"""The manual is tested like code: the site builds strictly, the generated config reference covers every field,
and every `python runnable` snippet in docs/*.md and README.md runs (docs/contributing.md, "Docs").

Snippets run through Sybil: the runnable blocks of one page share one namespace and run in order, in a fresh
working directory, with the catalogue model name swapped for the tiny random model's path.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sybil import Example, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser

from sparring.trainer import config as config_module
from sparring.trainer.schema import ConfigRecord, WorkflowArgs

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
CATALOGUE_MODEL = "smollm2-135m-instruct"
RUNNABLE = "python runnable"


class SnippetEvaluator(PythonEvaluator):
    """Runs a block as Sybil's Python evaluator does, with the catalogue model name replaced by `model_path`."""

    def __init__(self, model_path: str) -> None:
        super().__init__()
        self.model_path = model_path

    def __call__(self, example: Example) -> None:
        example.parsed = type(example.parsed)(
            example.parsed.replace(CATALOGUE_MODEL, self.model_path), example.parsed.offset, example.parsed.line_offset
        )
        super().__call__(example)


def runnable_sybil(model_path: str = "") -> Sybil:
    return Sybil(parsers=[CodeBlockParser(RUNNABLE, SnippetEvaluator(model_path))])


PAGES_WITH_SNIPPETS = [page for page in PAGES if list(runnable_sybil().parse(page))]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    """The site, built strictly as `make docs` builds it, into a temporary folder (not with --quiet: mkdocs then
    does not count the warnings that strict mode fails on)."""
    site = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    built = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return site


def test_every_nav_page_is_built(built_site):
    for page in (ROOT / "docs").rglob("*.md"):
        relative = page.relative_to(ROOT / "docs").with_suffix("")
        folder = relative.parent if relative.name == "index" else relative
        assert (built_site / folder / "index.html").is_file(), f"{page} was not built"


def config_records() -> list[type[ConfigRecord]]:
    """Every ConfigRecord subclass (their modules are imported above), found by subclassing rather than by the
    reference's own walk from TuneConfig, so a record the walk misses fails here; a workflow's arguments
    (`WorkflowArgs`, a game's own record, documented in its workflow.py) are no part of the job's config."""
    found, queue = [], [record for record in ConfigRecord.__subclasses__() if record is not WorkflowArgs]
    while queue:
        record = queue.pop()
        found.append(record)
        queue += record.__subclasses__()
    return found


def reference_rows(built_site: Path) -> dict[str, dict[str, str]]:
    """`{record name: {yaml key: the row's html}}` from the built configuration reference."""
    page = (built_site / "configuration" / "index.html").read_text()
    sections = {}
    for section in re.split(r'<h2 id="', page)[1:]:
        name = re.match(r'[^"]+">([A-Za-z]+)', section)[1]
        rows = re.findall(r"<tr>\s*<td><code>([^<]+)</code>(.*?)</tr>", section, re.DOTALL)
        sections[name] = {html.unescape(key): row for key, row in rows}
    return sections


def test_configuration_reference_covers_every_field(built_site):
    sections = reference_rows(built_site)
    records = config_records()
    assert {"TuneConfig", "TunerModelConfig", "AlgorithmConfig", "LeagueConfig"} <= {
        record.__name__ for record in records
    }
    for record in records:
        assert record.__name__ in sections, f"{record.__name__} has no section in the configuration reference"
        rows = sections[record.__name__]
        keys = {key.rsplit(".", 1)[-1]: row for key, row in rows.items()}
        assert set(keys) == set(record.model_fields), f"{record.__name__}: the reference's keys differ from its fields"
        for name, info in record.model_fields.items():
            assert info.description, f"{record.__name__}.{name} has no docstring"
            last_cell = re.findall(r"<td>(.*?)</td>", keys[name], re.DOTALL)[-1]
            shown = html.unescape(re.sub(r"<[^>]+>", "", last_cell))
            assert shown == " ".join(info.description.replace("`", "").split()), (
                f"{record.__name__}.{name}: its row lacks its docstring"
            )
    group_size = sections["AlgorithmConfig"]["algorithm.group_size"]
    default = config_module.AlgorithmConfig.model_fields["group_size"].default
    assert f"<code>{default}</code>" in group_size and f"≤ {config_module.MAX_GROUP_SIZE}" in group_size
    assert "models.&lt;name&gt;" in (built_site / "configuration" / "index.html").read_text()


def test_some_page_has_runnable_snippets():
    assert PAGES_WITH_SNIPPETS, f"no ```{RUNNABLE} block in docs/*.md or README.md"


@pytest.mark.parametrize("page", PAGES_WITH_SNIPPETS, ids=[str(page.relative_to(ROOT)) for page in PAGES_WITH_SNIPPETS])
def test_runnable_snippets(page, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(
        "SPARRING_HOME", str(tmp_path / "sparring-home")
    )  # what a snippet saves stays in the test's folder
    for example in runnable_sybil(str(tiny_model_dir)).parse(page):
        example.evaluate()
