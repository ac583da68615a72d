"""The run report: a tiny run trained through `sparring train` leaves reward.svg and report.html; the page holds
every curve, the evaluation table with its baseline, and every rollout token with its id, text and logprob;
`sparring view` writes it anywhere; and headless Chromium (when installed) draws it, curves and coloured tokens."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import threading
import urllib.request
import xml.etree.ElementTree as ElementTree
from html.parser import HTMLParser

import pytest
import yaml
from typer.testing import CliRunner

from sparring import WorkflowOutput
from sparring.cli import app
from sparring.logging import read_metrics, read_rollouts
from sparring.logging.plots import Series, line_chart
from sparring.logging.report import render_report, serve_report, spread_steps

runner = CliRunner()
TOPICS = ["cats", "tea", "rain", "maps"]


async def talk_with_helper(task, model, auxiliary_models):
    """Two turns of the learner around one frozen helper turn: a merged timeline and a frozen agent in each episode."""
    said = await model([{"role": "user", "content": task["topic"]}])
    heard = await auxiliary_models["helper"]([{"role": "user", "content": f"Answer briefly: {said.content}"}])
    await model(
        [
            {"role": "user", "content": task["topic"]},
            said.message,
            {"role": "user", "content": heard.content or "go on"},
        ]
    )
    return WorkflowOutput(reward=float(said.tokens[0] % 2), metrics={"success": float(said.tokens[0] % 3 == 0)})


def says_hello(messages, rng):
    """The baseline: always the same reply."""
    return "hello"


@pytest.fixture(scope="module")
def trained_run(tiny_model_dir, tmp_path_factory):
    """`sparring train` on the tiny model: 2 steps, evaluated before, between and after, one baseline beside."""
    root = tmp_path_factory.mktemp("report")
    tasks = root / "topics.jsonl"
    tasks.write_text("".join(json.dumps({"task_id": topic, "topic": topic}) + "\n" for topic in TOPICS))
    model = {"model_path": str(tiny_model_dir), "max_tokens": 5, "lora_rank": 2}
    config = {
        "workflow": "tests.test_report:talk_with_helper",
        "run_dir": str(root / "run"),
        "model": model,
        "auxiliary_models": {"helper": model},
        "train_dataset": {"path": str(tasks), "total_steps": 2},
        "eval_dataset": {"path": str(tasks)},
        "algorithm": {
            "group_size": 2,
            "batch_size": 2,
            "drop_zero_variance_groups": False,
        },
        "evaluation": {"interval_steps": 1},
        "checkpoints": {"interval_steps": 0},
        "baselines": {"says_hello": "tests.test_report:says_hello"},
        "logging": {"tensorboard": False},
    }
    (root / "job.yaml").write_text(yaml.safe_dump(config))
    result = runner.invoke(app, ["train", str(root / "job.yaml")])
    assert result.exit_code == 0, result.output
    return root / "run", result.output


class PageParts(HTMLParser):
    """The parts of the report a reader sees: charts, table cells, script blocks, and any external reference."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[str] = []
        self.header_cells: list[str] = []
        self.scripts: dict[str, str] = {}
        self.external: list[str] = []
        self._in: tuple[str, str] | None = None
        self._first_text = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "svg" and "chart" in (attributes.get("class") or ""):
            self.charts.append(attributes.get("data-metric"))
        for name in ("src", "href"):
            if attributes.get(name) and not attributes[name].startswith("#"):
                self.external.append(attributes[name])
        if tag == "link":
            self.external.append(str(attributes))
        if tag in ("script", "th"):
            self._in = (tag, attributes.get("id") or "")
            self._first_text = tag == "th"

    def handle_endtag(self, tag):
        if self._in and tag == self._in[0]:
            self._in = None

    def handle_data(self, data):
        if self._in and self._in[0] == "script":
            self.scripts[self._in[1]] = self.scripts.get(self._in[1], "") + data
        elif self._in and self._in[0] == "th" and self._first_text:
            self.header_cells.append(data)
            self._first_text = False


def page_of(path) -> PageParts:
    parts = PageParts()
    parts.feed(path.read_text(encoding="utf-8"))
    return parts


def test_train_writes_the_reward_curve_and_the_report_and_says_where(trained_run):
    run_dir, output = trained_run
    assert f"reward curve: {run_dir / 'reward.png'} (and reward.svg beside it)" in output
    png = (run_dir / "reward.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and int.from_bytes(png[16:20], "big") == 640  # 6.4 in x 100 dpi
    assert f"report (open in a browser): {run_dir / 'report.html'}" in output
    assert re.search(r"eval untrained: 4/4 episodes, \d+ tokens \(\d+ tok/s\) reward=", output), (
        "evaluations count their episodes off a terminal"
    )
    svg = ElementTree.parse(run_dir / "reward.svg").getroot()
    namespace = "{http://www.w3.org/2000/svg}"
    assert svg.tag == f"{namespace}svg"
    assert (
        svg.findall(f".//{namespace}polyline") and len(svg.findall(f".//{namespace}circle")) == 2 + 3
    )  # 2 steps, 3 evaluations
    assert "held-out reward" in ElementTree.tostring(svg, encoding="unicode")


def test_the_report_holds_every_curve_the_evaluation_and_every_token_offline(trained_run):
    run_dir, _ = trained_run
    page = page_of(run_dir / "report.html")
    assert page.external == [], "nothing is fetched: no script, style or image from elsewhere"
    assert {
        "reward/mean",
        "reward/std",
        "workflow/success",
        "train/loss",
        "time/step",
        "eval/reward/mean",
        "eval/workflow/success",
    } <= set(page.charts)
    assert not [chart for chart in page.charts if chart and chart.endswith(("ci_low", "ci_high"))], (
        "intervals are bands, not curves"
    )
    assert {"untrained", "step 1", "trained", "says_hello", "reward/mean", "workflow/success", "episodes"} <= set(
        page.header_cells
    )
    html_text = (run_dir / "report.html").read_text(encoding="utf-8")
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    for side, label_markers in evaluation["subject_vs"].items():
        for metric, marker in label_markers.items():
            assert {"above": "▲", "below": "▼"}[marker] in html_text, (side, metric)

    steps = json.loads(page.scripts["rollout-data"])
    assert [step["step"] for step in steps] == [1, 2], "numbered as metrics.jsonl and the console"
    for step in steps:
        rows = read_rollouts(run_dir / "rollouts" / f"step_{step['step']}.jsonl")
        timelines = [row for row in rows if "agent" in row]
        shown = [timeline for episode in step["episodes"] for timeline in episode["timelines"]]
        assert len(step["episodes"]) == 4 and len(shown) == len(timelines)
        for row, timeline in zip(timelines, shown, strict=True):
            assert timeline["tokens"] == row["tokens"] and timeline["mask"] == row["loss_mask"]
            assert "".join(timeline["texts"]) == row["text"], "per-token texts: the page needs no tokenizer"
            assert timeline["logprobs"] == pytest.approx([round(value, 4) for value in row["logprobs"]])
            assert timeline["calls"] == 2 and sum(timeline["mask"]) > 0
        for episode in step["episodes"]:
            (turn,) = episode["frozen"]["helper"]
            assert turn["new"][0]["text"].startswith("Answer briefly:") and turn["reply"]["role"] == "assistant"


def test_steps_and_evaluations_log_what_prefilling_cost_and_the_summary_says_it(trained_run):
    run_dir, _ = trained_run
    records = read_metrics(run_dir)
    steps = [record for record in records if "reward/mean" in record]
    evaluations = [record for record in records if "eval/episodes" in record]
    assert len(steps) == 2 and len(evaluations) == 3
    for record in steps:  # the prefix cache is on by default: a conversation's later turns read their start from it
        cached = record["engine/prefix_hit_rate"] * record["engine/prompt_tokens"]
        assert 0 < record["engine/prefilled_tokens"] <= record["engine/prompt_tokens"] - round(cached)
        assert record["engine/prefix_hit_rate"] > 0
    for record in evaluations:
        assert 0 < record["eval/engine/prefilled_tokens"] <= record["eval/engine/prompt_tokens"]
    prefilled = sum(record["engine/prefilled_tokens"] for record in steps) / sum(
        record["engine/prompt_tokens"] for record in steps
    )
    assert f"<b>{prefilled:.0%}</b> of" in (run_dir / "report.html").read_text(encoding="utf-8")


def test_sparring_view_writes_the_report_where_asked_and_names_a_missing_run(trained_run, tmp_path):
    run_dir, _ = trained_run
    result = runner.invoke(app, ["view", str(run_dir), "-o", str(tmp_path / "elsewhere" / "r.html")])
    assert result.exit_code == 0, result.output
    assert (
        tmp_path / "elsewhere" / "r.html"
    ).exists() and f"report: {tmp_path / 'elsewhere' / 'r.html'}" in result.output
    missing = runner.invoke(app, ["view", str(tmp_path / "no-run")])
    assert missing.exit_code == 2 and "is not a run directory" in missing.output


def test_a_served_report_reloads_itself_and_a_run_without_records_still_renders(tmp_path):
    page = render_report(tmp_path, live=True)
    assert '<meta http-equiv="refresh"' in page
    assert (
        "No metrics logged yet." in page
        and "No held-out evaluation" in page
        and "__" not in page.replace("__proto__", "")
    )


def test_charts_mark_lone_points_and_say_when_empty():
    one_step = line_chart("loss", [Series("loss", [(1.0, 0.5)], band=[(1.0, 0.4, 0.6)])], metric="loss")
    assert one_step.count("<circle") == 1 and 'class="band"' in one_step and "<polyline" not in one_step
    assert "no values" in line_chart("empty", [Series("x", [])])
    ElementTree.fromstring(
        line_chart("a <b> & c", [Series("s", [(0.0, 1.0), (1.0, 2.0)], dashed=True)])
    )  # valid XML, text escaped


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip(
            "headless Chromium is not installed (Debian: apt-get install chromium); the report's layout is "
            "checked only with it"
        )
    return found


def _png_size(path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", "a PNG file"
    return struct.unpack(">II", header[16:24])


def test_headless_chromium_draws_the_curves_and_the_coloured_token_timeline(trained_run, tmp_path):
    chromium = _chromium()
    run_dir, _ = trained_run
    url = (run_dir / "report.html").resolve().as_uri() + "#step=1&task=0&episode=1"
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=180, check=True).stdout
    steps = json.loads(page_of(run_dir / "report.html").scripts["rollout-data"])
    episode = next(e for e in steps[1]["episodes"] if e["episode"] == 1)
    (timeline,) = episode["timelines"]
    sampled = re.findall(r'<span class="tok sampled[^"]*" data-i="\d+"( style="background: rgba\([^"]+\);")?', dom)
    prompt = re.findall(r'<span class="tok prompt" data-i="\d+"', dom)
    assert len(sampled) == sum(timeline["mask"]) and len(prompt) == len(timeline["mask"]) - sum(timeline["mask"]), (
        "one span per token of the chosen episode"
    )
    assert any(sampled), "sampled tokens are coloured by their advantage"
    assert dom.count('class="chart"') >= 10 and "<polyline" in dom
    assert "group 0 · episode 1 ·" in dom and "helper (frozen, not trained)" in dom, (
        "the episode the URL names, frozen turns too"
    )
    first_sampled = timeline["mask"].index(1)
    pinned = subprocess.run(
        [*flags, "--dump-dom", f"{url}&token={first_sampled}"], capture_output=True, text=True, timeout=180, check=True
    ).stdout
    tip = re.search(r'<div id="tip" style="[^"]*display: block;[^"]*">([^<]*)</div>', pinned)
    assert tip, "the token named in the URL shows its tooltip, as on hover"
    token_id, logprob = timeline["tokens"][first_sampled], timeline["logprobs"][first_sampled]
    assert f"token {first_sampled} · id {token_id}" in tip.group(1) and f"sampling logprob {logprob:.4f}" in tip.group(
        1
    )
    assert "text " + json.dumps(timeline["texts"][first_sampled], ensure_ascii=False).replace("&", "&amp;").replace(
        "<", "&lt;"
    ).replace(">", "&gt;") in tip.group(1)
    shot = tmp_path / "report.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1400,2400", url], capture_output=True, timeout=180, check=True
    )
    width, height = _png_size(shot)
    assert (width, height) == (1400, 2400) and shot.stat().st_size > 50_000, "a drawn page, not a blank one"


def test_a_long_run_puts_in_evenly_spread_steps_the_last_among_them():
    assert spread_steps(list(range(100)), 5) == [0, 25, 50, 74, 99]
    assert (
        spread_steps([3, 4], 5) == [3, 4]
        and spread_steps([1, 2, 3], None) == [1, 2, 3]
        and spread_steps([1, 2, 3], 1) == [3]
    )


def test_view_serve_answers_with_the_report_rendered_afresh(trained_run):
    run_dir, _ = trained_run
    server = serve_report(run_dir, port=0, rollout_steps=1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/", timeout=30) as response:
            page = response.read().decode("utf-8")
    finally:
        server.shutdown()
        server.server_close()
    assert '<meta http-equiv="refresh"' in page and "rollouts of <b>1 of 2</b> steps" in page
    assert [step["step"] for step in json.loads(page.split('id="rollout-data">')[1].split("</script>")[0])] == [
        2
    ]  # the last step


def test_rollouts_of_older_runs_numbered_from_0_read_as_steps_from_1(tmp_path):
    from sparring.logging.report import one_based, read_run

    assert one_based([1, 2, 3]) == {1: 1, 2: 2, 3: 3}
    assert one_based([0, 1, 2]) == {0: 1, 1: 2, 2: 3}
    assert one_based([0, 1, 3, 4]) == {0: 1, 1: 2, 3: 3, 4: 4}, "an old run resumed since: its new files are 1-based"
    (tmp_path / "rollouts").mkdir()
    for number in (0, 1):
        (tmp_path / "rollouts" / f"step_{number}.jsonl").write_text(f'{{"step": {number}, "episode": 0}}\n')
    assert sorted(read_run(tmp_path).rollouts) == [1, 2]
