"""The HTML report as a file: sections, escaping, the CSP, size and speed, the CLI, old portraits.

What it looks like in a browser is tests/reports/test_report_browser.py.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
from html import unescape
from pathlib import Path

import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe.cli import main
from loadprobe.portrait import Portrait
from loadprobe.reports.html import is_report, render_comparison, render_report, script_json, write_html
from loadprobe.analysis.timeline import MAX_POINTS, MAX_TOTAL_POINTS, bucket_seconds

from ..conftest import HOSTILE_NAMES, REPO, record_hostile_service
from ..support.fleet_portrait import fleet_portrait

VISION, LLM = REPO / "samples" / "data" / "vision", REPO / "samples" / "data" / "llm"
FIVE_MB = 5_000_000


@pytest.fixture(scope="module")
def vision():
    return loadprobe.analyze([str(VISION)], device="nvidia-l4")


def _figures(html: str) -> dict:
    blob = re.search(r'<script type="application/json" id="lp-figures">(.*?)</script>', html, re.S).group(1)
    return json.loads(blob)


def _inline_scripts(html: str) -> list[str]:
    return re.findall(r"<script>(.*?)</script>", html, re.S)


@pytest.mark.parametrize("sample", [VISION, LLM], ids=["vision", "llm"])
def test_each_sample_renders_every_section(sample):
    portrait = loadprobe.analyze([str(sample)])
    html = render_report(portrait)
    assert html.startswith("<!DOCTYPE html>")
    assert len(html.encode()) < FIVE_MB
    for section in ("traffic", "shares", "latency", "batch", "devices", "roofline", "bottlenecks", "quality"):
        assert f'<section id="{section}"' in html, section
    figures = _figures(html)
    assert {"arrivals", "shares", "latency", "devices"} <= set(figures)
    for chart in re.findall(r'data-figure="([^"]+)"', html):
        assert chart in figures and figures[chart]["data"]
    assert html.count('class="reading"') >= 8  # a one-line reading per section
    assert 'id="plan"' not in html  # no recommendation given, none shown


def test_plan_section_shows_each_decision_the_alternatives_and_pipeline_yaml(vision):
    from loadprobe.pipeline.files import dump
    from loadprobe.plan.files import plan_dict

    plan = loadprobe.recommend(vision)
    yaml_text = dump(plan.to_pipeline())
    html = render_report(vision, plans=plan_dict(plan), pipeline_yaml=yaml_text)
    section = html[html.index('<section id="plan"'):html.index('<section id="quality"')]
    for decision in plan.recommended.decisions:
        assert f'<th scope="row">{decision.stage}</th>' in section
    for option in plan.alternatives:
        assert option.name in section
    assert "Copy pipeline.yaml" in section and "version: 1" in section


def test_the_csp_lets_only_the_pages_own_scripts_run_and_nothing_leave():
    portrait = loadprobe.analyze([str(LLM)])
    html = render_report(portrait)
    policy = unescape(re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'" and directives["connect-src"] == "'none'"
    assert "unsafe-inline" not in directives["script-src"] and "unsafe-eval" not in directives["script-src"]
    assert "http" not in policy
    payload = re.search(r'id="lp-plotly" data-encoding="gzip\+base64">([^<]+)</script>', html).group(1)
    plotly = gzip.decompress(base64.b64decode(payload))
    sources = [s.encode() for s in _inline_scripts(html)] + [plotly]
    hashes = {"'sha256-" + base64.b64encode(hashlib.sha256(s).digest()).decode() + "'" for s in sources}
    assert set(directives["script-src"].split()) == hashes
    assert len(_inline_scripts(html)) == 1 and html.count("<script") == 3  # data, Plotly, the page script
    assert not re.search(r'\b(src|href)="(https?:)?//', html)  # no outside resources
    assert html.index("Content-Security-Policy") < html.index("<style>")


def test_recorded_strings_are_escaped_in_html_and_in_json(tmp_path):
    record_hostile_service(tmp_path / "data")
    html = render_report(loadprobe.analyze([str(tmp_path / "data")]))
    assert html.count("<script") == 3 and html.count("</script>") == 3
    for name in HOSTILE_NAMES:
        assert name not in html  # never raw: not in the markup, not in the JSON
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img" not in html and "<svg" not in html and "<i>npu" not in html
    traces = [t.get("name", "") for fig in _figures(html).values() for t in fig["data"]]
    assert "&lt;img src=x onerror=alert(1)&gt;" in traces  # Plotly shows entities as the characters


def test_script_json_cannot_close_its_element():
    text = script_json({"stage": "</script><!-- <script>\u2028&"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"stage": "</script><!-- <script>\u2028&"}
    assert script_json({"x": float("nan"), "y": [float("inf")]}) == '{"x":null,"y":[null]}'


def test_a_fleets_day_renders_under_5_mb():  # its render time: benchmarks/bench_report.py
    portrait = fleet_portrait()  # 100M spans, 24 h, 8 hosts x 4 GPUs, 12 stages
    again = Portrait.from_dict(json.loads(portrait.to_json()))
    html = render_report(again)
    assert len(html.encode()) < FIVE_MB, f"{len(html.encode()):,} bytes"
    figures = _figures(html)
    assert {"arrivals", "hours", "shares", "latency", "batch", "batch_fit", "devices", "roofline"} <= set(figures)
    for fig in figures.values():
        for trace in fig["data"]:
            assert len(trace.get("y") or trace.get("x") or []) <= 2000


def test_display_fields_of_portrait_1_2(vision):
    from loadprobe.portrait import PORTRAIT_VERSION

    assert vision.version == PORTRAIT_VERSION
    tl = vision.timeline
    assert tl.bucket_s == 1 and tl.buckets <= MAX_POINTS
    assert {s.metric for s in tl.device_series} >= {"util_pct", "used_bytes"}
    assert {s.stage for s in tl.stage_series} >= {"backbone", "decode"}
    for series in tl.device_series:
        assert len(series.values) == tl.buckets
    backbone = vision.stage("backbone")
    cdf = backbone.latency_cdf
    assert 10 < len(cdf) <= 200 and cdf[-1][1] == 1.0
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(cdf, cdf[1:]))
    assert cdf[-1][0] == pytest.approx(backbone.latency_ms.max)
    assert vision.requests.latency_cdf[-1][1] == 1.0
    roofs = vision.roofline_roofs
    assert roofs.device == "nvidia-l4" and roofs.precision == "fp16" and roofs.peak_flops_per_s["fp16"] > 0
    # busy time per bucket adds up to the stage's whole time
    busy_s = sum(next(s for s in tl.stage_series if s.stage == "backbone").busy) * tl.bucket_s
    total_s = backbone.latency_ms.mean * backbone.latency_ms.count / 1e3
    assert busy_s == pytest.approx(total_s, rel=0.01)


def test_timeline_buckets_keep_every_series_short():
    assert bucket_seconds(0, 59, 10) == 1
    day = bucket_seconds(0, 86_399, 10)
    assert day == 60 and 86_400 / day <= MAX_POINTS
    fleet = bucket_seconds(0, 86_399, 500)
    assert 86_400 / fleet * 500 <= MAX_TOTAL_POINTS
    assert 3 * 365 * 86_400 / bucket_seconds(0, 3 * 365 * 86_400, 1) <= MAX_POINTS


def test_a_portrait_1_1_still_renders_and_says_what_it_lacks(vision):
    data = vision.to_dict()
    data["version"] = "1.1"
    for key in ("timeline", "roofline_roofs"):
        data.pop(key)
    data["requests"].pop("latency_cdf")
    for stage in data["stages"]:
        stage.pop("latency_cdf")
    html = render_report(Portrait.from_dict(data))
    assert "re-run loadprobe analyze" in html
    assert "latency" not in _figures(html) and "arrivals" in _figures(html)


def test_comparison_shows_both_sides_and_the_deltas(vision):
    llm = loadprobe.analyze([str(LLM)])
    html = render_comparison(vision, llm, labels=("vision", "llm"))
    assert "vision" in html and "llm" in html
    deltas = html[html.index('<section id="deltas"'):html.index('<section id="sides"')]
    p95a, p95b = vision.requests.latency_ms.p95, llm.requests.latency_ms.p95
    assert f"{p95b - p95a:+.3g} ms" in deltas and "(worse)" in deltas
    assert {"cmp_latency", "cmp_stage_p95", "cmp_shares", "cmp_arrivals"} <= set(_figures(html))


def test_write_html_replaces_a_file_only_when_told(tmp_path):
    path = tmp_path / "r.html"
    path.write_text("mine")
    with pytest.raises(loadprobe._errors.LoadprobeError, match="exists"):
        write_html(path, "<html></html>")
    assert path.read_text() == "mine"
    assert write_html(path, "<html></html>", overwrite=True) == len("<html></html>")


# -- the command line ------------------------------------------------------------------------


def test_analyze_writes_portrait_html_beside_portrait_json(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["analyze", str(VISION), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert is_report(out / "portrait.html") and (out / "portrait.json").is_file()
    assert "report:" in result.output
    again = CliRunner().invoke(main, ["analyze", str(VISION), "-o", str(out)])  # kept without --force
    assert again.exit_code == 2 and "portrait.json exists; pass --force" in again.output, again.output
    again = CliRunner().invoke(main, ["analyze", str(VISION), "-o", str(out), "--force"])  # its own report is replaced
    assert again.exit_code == 0, again.output
    none = tmp_path / "none"
    assert CliRunner().invoke(main, ["analyze", str(VISION), "-o", str(none), "--no-html"]).exit_code == 0
    assert not (none / "portrait.html").exists()


def test_analyze_never_replaces_someone_elses_portrait_html(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "portrait.html").write_text("<html>my notes</html>")
    result = CliRunner().invoke(main, ["analyze", str(VISION), "-o", str(out)])
    assert result.exit_code == 2 and "portrait.html exists; pass --force" in result.output
    result = CliRunner().invoke(main, ["analyze", str(VISION), "-o", str(out), "--force"])  # not even then
    assert result.exit_code == 2 and "not written by loadprobe" in result.output
    assert (out / "portrait.html").read_text() == "<html>my notes</html>"
    assert not (out / "portrait.json").exists()


def test_report_command_single_comparison_and_overwrite(tmp_path):
    runner = CliRunner()
    out = tmp_path / "r"
    assert runner.invoke(main, ["analyze", str(VISION), "-o", str(out), "--no-html"]).exit_code == 0
    single = runner.invoke(main, ["report", str(out / "portrait.json"), "-o", str(tmp_path / "a.html")])
    assert single.exit_code == 0, single.output
    assert re.search(r"report: .*a\.html \(\d+\.\d MB\)", single.output)
    refused = runner.invoke(main, ["report", str(out), "-o", str(tmp_path / "a.html")])
    assert refused.exit_code == 2 and "exists" in refused.output
    forced = runner.invoke(main, ["report", str(out), "-o", str(tmp_path / "a.html"), "--force"])
    assert forced.exit_code == 0
    diff = runner.invoke(main, ["report", str(out / "portrait.json"), str(LLM), "-o", str(tmp_path / "d.html"),
                                "--label", "before", "--label", "after"])
    assert diff.exit_code == 0, diff.output
    assert "before vs after" in (tmp_path / "d.html").read_text()
    three = runner.invoke(main, ["report", "a", "b", "c"])
    assert three.exit_code == 2 and "two to compare" in three.output


def test_report_includes_a_plan_only_when_it_is_newer_than_the_portrait(tmp_path):
    runner = CliRunner()
    out = tmp_path / "r"
    assert runner.invoke(main, ["analyze", str(VISION), "-o", str(out), "--no-html"]).exit_code == 0
    made = runner.invoke(main, ["recommend", str(out / "portrait.json"), "-o", str(out / "pipeline.yaml")])
    assert made.exit_code == 0, made.output
    with_plan = runner.invoke(main, ["report", str(out), "-o", str(tmp_path / "p.html")])
    assert "plan from" in with_plan.output and 'id="plan"' in (tmp_path / "p.html").read_text()
    stale = (out / "plans.json").stat().st_mtime - 60  # a plan older than the portrait belongs to another
    os.utime(out / "plans.json", (stale, stale))
    runner.invoke(main, ["report", str(out), "-o", str(tmp_path / "q.html")])
    assert 'id="plan"' not in (tmp_path / "q.html").read_text()
    explicit = runner.invoke(main, ["report", str(out), "-o", str(tmp_path / "e.html"), "--plans",
                                    str(out / "plans.json")])
    assert explicit.exit_code == 0 and 'id="plan"' in (tmp_path / "e.html").read_text()
    assert Path(tmp_path / "e.html").stat().st_size < FIVE_MB


def test_batch_sizes_beyond_the_commonest_end_in_an_other_bar(tmp_path):
    out = tmp_path / "data"
    loadprobe.start(out, service="batches", sample_devices=False)
    try:
        for i in range(400):  # 100 distinct batch sizes, the largest the rarest
            with loadprobe.request(id=f"r{i}"):
                size = 1 + i % 100 if i < 300 else 1 + i % 10
                with loadprobe.Span("model") as span:
                    span.batch = size
    finally:
        loadprobe.stop()
    portrait = loadprobe.analyze([str(out)])
    batch = portrait.stage("model").batch
    assert len(batch.distribution) == 64 and batch.max == 100
    assert batch.other_sizes == 36 and batch.other == 400 - sum(batch.distribution.values())
    trace = _figures(render_report(portrait))["batch"]["data"][0]
    assert trace["x"][-1].startswith("other (36 sizes, up to 100)")
    assert trace["customdata"][-1] == batch.other
    assert sum(trace["y"]) == pytest.approx(100, abs=0.01)  # shares of every span, the tail included


def test_a_roofline_without_a_device_says_so_on_the_chart_and_keeps_room_for_its_labels():
    import math

    from loadprobe.reports.figures import roofline

    for device, roofs in ((None, False), ("nvidia-l4", True)):
        portrait = loadprobe.analyze([str(VISION)], device=device)
        if not roofs and portrait.roofline_roofs is not None:
            pytest.skip("the sample's recorded hardware is in the catalog: a roofline device is always chosen")
        chart = roofline(portrait)
        notes = [a["text"] for a in chart["layout"].get("annotations", [])]
        assert any("no roofs" in n for n in notes) != roofs, notes
        top = max(y for trace in chart["data"] for y in trace["y"])
        assert chart["layout"]["yaxis"]["range"][1] >= math.log10(top) + 0.4  # room for a name above the top point
