"""The run report: one self-contained HTML file that shows what a run did and what its agents learned.

`read_run` gathers what a run directory holds (`metrics.jsonl`,
`evaluation.json`, `rollouts/step_N.jsonl`, `config.yaml`) into `RunRecords`;
`render_report` turns them into one HTML page: the reward curve, the
held-out evaluation as a table (models and baselines, mean and 95 % interval,
▲ / ▼ where the trained model's interval lies entirely above / below another
column's, as on the console), a rollout browser (step -> task -> episode)
that shows each trainable agent's merged timeline token by token, coloured by
loss mask and advantage (hover: token id, text, sampling logprob), with the
frozen agents' turns beside it, and every metric over steps as inline SVG
charts (`plots.py`); a league run's last step is also a table of its opponents
(draw probability, games, win / draw / loss rates). The page carries its data as inline JSON and its script and
style inline (`report_template.html`): it needs no network and no tokenizer.
`write_report` writes it (`run_dir/report.html` by default); `serve_report`
serves it freshly rendered on every request, so a browser follows a run live.
"""

from __future__ import annotations

import html
import http.server
import json
import re
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .metrics import METRICS_FILE, is_plotted_number, read_metrics
from .plots import Series, line_chart, metric_series, reward_chart
from .rollouts import ROLLOUTS_DIR, read_rollouts

REPORT_FILE = "report.html"
EVALUATION_FILE = "evaluation.json"
"""Where a training run stores its held-out comparison (written by `sparring.trainer.evaluation.Comparison`)."""
CONFIG_FILE = "config.yaml"
MARKERS = {"above": "▲", "below": "▼"}
SECTION_TITLES = {
    "reward": "Reward",
    "eval": "Held-out evaluation",
    "workflow": "The workflow's metrics",
    "agent": "Per agent",
    "role": "Per role",
    "league": "League opponents",
}
LEAGUE_OUTCOMES = ("win", "draw", "loss")
DEFAULT_ROLLOUT_STEPS = 24
"""A report holds the rollouts of at most this many steps (a long werewolf run's rollouts would make a page of
hundreds of MB); `sparring view --rollout-steps 0` puts in all of them."""
LIVE_REFRESH_S = 30
"""How often a served report reloads itself (the chosen step, task and episode survive: they live in the URL)."""
_STEP_FILE = re.compile(r"step_(\d+)\.jsonl$")


@dataclass
class RunRecords:
    """What a run directory holds that the report shows."""

    run_dir: Path
    """The run directory."""
    metrics: list[dict] = field(default_factory=list)
    """metrics.jsonl: one record per step (training) and per evaluation."""
    evaluation: dict | None = None
    """evaluation.json (the held-out comparison), when the run evaluated."""
    rollouts: dict[int, list[dict]] = field(default_factory=dict)
    """Per training step, the rows of rollouts/step_N.jsonl."""
    config_text: str | None = None
    """config.yaml as written, shown so the report says what was run."""
    rollout_steps_total: int = 0
    """How many steps left rollouts (``rollouts`` may hold fewer: a report of a long run picks some)."""


def spread_steps(steps: list[int], most: int | None) -> list[int]:
    """At most ``most`` of the sorted ``steps``, evenly spread, the first and the last always among them (None: all)."""
    if most is None or len(steps) <= most:
        return steps
    if most < 2:
        return steps[-most:] if most else []
    return sorted({steps[round(index * (len(steps) - 1) / (most - 1))] for index in range(most)})


def one_based(numbers: list[int]) -> dict[int, int]:
    """Rollout file number -> its step, counted from 1 as metrics.jsonl counts. Older runs wrote step_0.jsonl for
    step 1: where a step_0 file is there, the files up to the first missing number (a run resumed since then
    writes on from its next step, 1-based) are moved up by one."""
    if 0 not in numbers:
        return {number: number for number in numbers}
    old = next(index for index, number in enumerate([*numbers, None]) if number != index)
    return {number: number + 1 if index < old else number for index, number in enumerate(numbers)}


def read_run(run_dir: str | Path, rollout_steps: int | None = None) -> RunRecords:
    """Read every record of ``run_dir`` the report needs; files a run has not written (yet) are left empty.

    ``rollout_steps`` bounds how many steps' rollouts are read (evenly spread, the last included); None reads all.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a run directory")
    records = RunRecords(run_dir)
    if (run_dir / METRICS_FILE).exists():
        records.metrics = read_metrics(run_dir)
    if (run_dir / EVALUATION_FILE).exists():
        records.evaluation = json.loads((run_dir / EVALUATION_FILE).read_text(encoding="utf-8"))
    found_files = ((_STEP_FILE.search(path.name), path) for path in (run_dir / ROLLOUTS_DIR).glob("step_*.jsonl"))
    files = {int(found.group(1)): path for found, path in found_files if found}
    steps = {number: files[found] for found, number in one_based(sorted(files)).items()}
    records.rollout_steps_total = len(steps)
    records.rollouts = {step: read_rollouts(steps[step]) for step in spread_steps(sorted(steps), rollout_steps)}
    if (run_dir / CONFIG_FILE).exists():
        records.config_text = (run_dir / CONFIG_FILE).read_text(encoding="utf-8")
    return records


def metric_sections(records: list[dict]) -> list[tuple[str, list[str]]]:
    """(section title, charts) for every numeric metric, one section per first name part: reward, the held-out
    evaluation, the workflow's own metrics, then the rest by name.

    An evaluation chart (`eval/<metric>`) shows the interval as a band and each baseline's level as a dashed line.
    """
    keys = list(
        dict.fromkeys(
            key for record in records for key, value in record.items() if key != "step" and is_plotted_number(value)
        )
    )
    interval_keys = {key for key in keys if key.endswith(("/ci_low", "/ci_high"))}
    training = [key for key in keys if key not in interval_keys and not key.startswith(("eval/", "baseline/"))]
    sections: dict[str, list[str]] = {}
    for key in training:
        section = key.split("/")[0] if "/" in key else "run"
        sections.setdefault(section, []).append(line_chart(key, [metric_series(records, key)], metric=key))
    evaluated = [key for key in keys if key.startswith("eval/") and key not in interval_keys and key != "eval/episodes"]
    baselines = sorted({key.split("/")[1] for key in keys if key.startswith("baseline/")})
    for key in evaluated:
        metric = key.removeprefix("eval/")
        series = [metric_series(records, key, "model")]
        for name in baselines:
            level = metric_series(records, f"baseline/{name}/{metric}")
            if level.points:
                steps = [step for step, _ in series[0].points] or [step for step, _ in level.points]
                series.append(
                    Series(name, [(min(steps), level.points[0][1]), (max(steps), level.points[0][1])], dashed=True)
                )
        sections.setdefault("eval", []).append(line_chart(metric, series, metric=key))
    ordered = ["reward", "eval", "workflow"] + sorted(set(sections) - {"reward", "eval", "workflow"})
    return [(SECTION_TITLES.get(name, name), sections[name]) for name in ordered if name in sections]


def league_html(metrics: list[dict]) -> str:
    """The last training step's league as a table: per opponent in its pool, the chance it was drawn, the games played
    against it and the policy's win / draw / loss rates in them."""
    last = next((record for record in reversed(metrics) if any(key.startswith("league/") for key in record)), None)
    if last is None:
        return ""
    opponents = [key.split("/")[1] for key in last if key.startswith("league/") and key.endswith("/draw_probability")]
    rows = []
    for name in opponents:
        games = last.get(f"league/{name}/games")
        rates = "".join(
            f"<td>{last[f'league/{name}/{outcome}_rate']:.2f}</td>" if games else "<td>-</td>"
            for outcome in LEAGUE_OUTCOMES
        )
        rows.append(
            f"<tr><th>{html.escape(name)}</th><td>{last[f'league/{name}/draw_probability']:.3f}</td>"
            f"<td>{int(games or 0)}</td>{rates}</tr>"
        )
    header = "<tr><th>opponent</th><th>draw probability</th><th>games</th><th>win</th><th>draw</th><th>loss</th></tr>"
    return (
        f'<p class="caption">The pool at step {last.get("step")}, the policy\'s results against each opponent '
        f'in that step.</p><table class="evaluation">{header}{"".join(rows)}</table>'
    )


def _estimate_cell(found: dict | None, marker: str | None) -> str:
    if found is None:
        return '<td class="missing">-</td>'
    text = f'{found["mean"]:.3f} <span class="interval">[{found["low"]:.3f}, {found["high"]:.3f}]</span>'
    if marker:
        text += f' <span class="marker {marker}">{MARKERS[marker]}</span>'
    return f'<td title="n = {found.get("n")}, {html.escape(str(found.get("method")))}">{text}</td>'


def evaluation_html(evaluation: dict | None) -> str:
    """The held-out comparison as HTML tables: one row per metric, one column per policy; per-agent rows folded away."""
    if not evaluation or not evaluation.get("columns"):
        return (
            '<p class="empty">No held-out evaluation in this run (set '
            "<code>evaluation.interval_steps</code> and eval tasks).</p>"
        )
    columns, subject, markers = evaluation["columns"], evaluation.get("subject"), evaluation.get("subject_vs", {})
    names = sorted({name for column in columns for name in column["metrics"]})
    names = (["reward/mean"] if "reward/mean" in names else []) + [name for name in names if name != "reward/mean"]
    main = [name for name in names if not (name.startswith(("agent/", "role/")) and not name.endswith("/win_rate"))]
    detail = [name for name in names if name not in main]

    def table(rows: list[str]) -> str:
        header = "".join(
            "<th "
            f'class="{"subject" if c["label"] == subject else c["kind"]}">{html.escape(c["label"])}'
            f"<br><small>{c['kind']}" + (f", step {c['step']}" if c.get("step") is not None else "") + "</small></th>"
            for c in columns
        )
        body = []
        for name in rows:
            cells = "".join(
                _estimate_cell(c["metrics"].get(name), markers.get(c["label"], {}).get(name)) for c in columns
            )
            body.append(f"<tr><th>{html.escape(name)}</th>{cells}</tr>")
        episodes = "".join(f"<td>{c['episodes']}</td>" for c in columns)
        return (
            "<table "
            f'class="evaluation"><tr><th>metric</th>{header}</tr>{"".join(body)}<tr><th>episodes</th>{episodes}</tr></table>'
        )

    baselines = [c["label"] for c in columns if c["kind"] == "baseline"]
    caption = (
        "Mean [95 % interval] over the held-out episodes. ▲ / ▼ in a column: "
        f"{html.escape(str(subject))}'s interval lies "
        "entirely above / below that column's (whether higher is better depends on the metric); "
        "overlapping intervals are "
        f"no resolved difference. {html.escape(evaluation.get('intervals', ''))}"
    )
    if baselines:
        caption += (
            " Baselines (scripted policies in the trained model's place, never trained): "
            f"{html.escape(', '.join(baselines))}."
        )
    parts = [table(main), f'<p class="caption">{caption}</p>']
    if detail:
        parts.append(f"<details><summary>Per agent and role ({len(detail)} metrics)</summary>{table(detail)}</details>")
    return "".join(parts)


def rollout_data(rollouts: dict[int, list[dict]]) -> list[dict]:
    """The rollout rows regrouped per step and episode, as the page's browser reads them."""
    steps = []
    for step, rows in rollouts.items():
        episodes: dict[int, dict] = {}
        for row in rows:
            episode = episodes.setdefault(
                row["episode"],
                {
                    "episode": row["episode"],
                    "group": row["group"],
                    "task": row.get("task_id"),
                    "error": None,
                    "rewards": {},
                    "metrics": {},
                    "timelines": [],
                    "frozen": {},
                },
            )
            episode["error"] = episode["error"] or row.get("error")
            if "agent" in row:
                episode["rewards"][row["agent"]] = row.get("reward")
                episode["timelines"].append(_timeline(row))
            elif "frozen_turns" in row:
                episode["frozen"] = row["frozen_turns"]
            else:
                episode["rewards"].update(row.get("rewards", {}))
                episode["metrics"] = row.get("metrics", {})
        steps.append({"step": step, "episodes": sorted(episodes.values(), key=lambda found: found["episode"])})
    return steps


def _timeline(row: dict) -> dict:
    return {
        "agent": row["agent"],
        "model": row.get("model"),
        "role": row.get("role"),
        "reward": row.get("reward"),
        "advantage": row.get("advantage"),
        "calls": row.get("num_calls"),
        "tokens": row["tokens"],
        "mask": row["loss_mask"],
        "logprobs": [None if value is None else round(value, 4) for value in row["logprobs"]],
        "call_index": row.get("call_index") or [],
        "constrained": row.get("constrained") or [],
        "texts": row.get("token_texts"),
    }


def _inline_json(data) -> str:
    """JSON that can sit inside a <script> element: no '</' can end it early."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False).replace("</", "<\\/")


def _summary_html(records: RunRecords) -> str:
    training = [record for record in records.metrics if "reward/mean" in record]
    shown = (
        f"{len(records.rollouts)}"
        if len(records.rollouts) == records.rollout_steps_total
        else f"{len(records.rollouts)} of {records.rollout_steps_total}"
    )
    items = [f"<b>{len(training)}</b> training steps logged", f"rollouts of <b>{shown}</b> steps"]
    if training:
        last = training[-1]
        items.append(f"last step's mean reward <b>{last['reward/mean']:.3f}</b>")
        seconds = sum(record.get("time/step") or 0 for record in training)
        items.append(f"<b>{seconds:.1f} s</b> in training steps")
        prompt = sum(record.get("engine/prompt_tokens") or 0 for record in training)
        if prompt:
            prefilled = sum(record.get("engine/prefilled_tokens") or 0 for record in training)
            reused = sum(
                (record.get("engine/prefix_hit_rate") or 0) * (record.get("engine/prompt_tokens") or 0)
                for record in training
            )
            items.append(
                f"prompts: <b>{prefilled / prompt:.0%}</b> of {prompt:,.0f} tokens prefilled, "
                f"{reused / prompt:.0%} read from the prefix cache"
            )
    if records.evaluation:
        items.append(f"held-out comparison: {len(records.evaluation['columns'])} columns")
    return " · ".join(items)


def render_report(run_dir: str | Path, *, live: bool = False, rollout_steps: int | None = DEFAULT_ROLLOUT_STEPS) -> str:
    """The report of ``run_dir`` as one HTML document; ``live`` makes it reload itself every LIVE_REFRESH_S seconds.

    ``rollout_steps``: the rollouts of at most this many steps (evenly spread, the last included) go in; None: all.
    """
    records = read_run(run_dir, rollout_steps)
    headline = (
        f'<div class="headline">{reward_chart(records.metrics)}</div>'
        if records.metrics
        else '<p class="empty">No metrics logged yet.</p>'
    )
    charts = []
    for title, svgs in metric_sections(records.metrics):
        table = league_html(records.metrics) if title == SECTION_TITLES["league"] else ""
        charts.append(f'<h3>{html.escape(title)}</h3>{table}<div class="charts">{"".join(svgs)}</div>')
    config = (
        f"<details><summary>config.yaml</summary><pre>{html.escape(records.config_text)}</pre></details>"
        if records.config_text
        else ""
    )
    fills = {
        "__TITLE__": html.escape(f"sparring run {records.run_dir.resolve().name}"),
        "__HEAD_EXTRA__": f'<meta http-equiv="refresh" content="{LIVE_REFRESH_S}">' if live else "",
        "__RUN_DIR__": html.escape(str(records.run_dir.resolve())),
        "__WRITTEN__": time.strftime("%Y-%m-%d %H:%M:%S"),
        "__SUMMARY__": _summary_html(records),
        "__CONFIG__": config,
        "__HEADLINE__": headline,
        "__CHARTS__": "".join(charts) or '<p class="empty">No metrics logged yet.</p>',
        "__EVALUATION__": evaluation_html(records.evaluation),
        "__ROLLOUTS__": _inline_json(rollout_data(records.rollouts)),
    }
    page = resources.files(__package__).joinpath("report_template.html").read_text(encoding="utf-8")
    return re.sub("|".join(fills), lambda found: fills[found.group(0)], page)


def write_report(
    run_dir: str | Path, path: str | Path | None = None, *, rollout_steps: int | None = DEFAULT_ROLLOUT_STEPS
) -> Path:
    """Write the report of ``run_dir`` to ``path`` (default ``run_dir/report.html``); returns the file written."""
    path = Path(path) if path is not None else Path(run_dir) / REPORT_FILE
    text = render_report(run_dir, rollout_steps=rollout_steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
    return path


def serve_report(
    run_dir: str | Path, host: str = "127.0.0.1", port: int = 8050, *, rollout_steps: int | None = DEFAULT_ROLLOUT_STEPS
) -> http.server.ThreadingHTTPServer:
    """An HTTP server (not yet started: call ``serve_forever``) answering every GET with the report rendered afresh."""
    run_dir = Path(run_dir)

    class ReportHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = render_report(run_dir, live=True, rollout_steps=rollout_steps).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass  # no line per request on the console

    return http.server.ThreadingHTTPServer((host, port), ReportHandler)
