"""The HTML report in a real browser: headless Chromium opens the files from disk.

Checked: no console errors, no request but the file itself, every chart drawn with data
points and labelled for keyboard and screen-reader users, screenshots at desktop and
phone widths that are not blank, light and dark, the copy button, the two-run
comparison, and an injection probe that stays text.
"""

from __future__ import annotations

import json
import re

import pytest

import loadprobe
from loadprobe.pipeline.files import dump
from loadprobe.plan.files import plan_dict
from loadprobe.reports.html import render_comparison, render_report, write_html

from ..support import report_browser as browser
from ..conftest import HOSTILE_NAMES, REPO, record_hostile_service

pytestmark = pytest.mark.skipif(browser.skip_reason() is not None, reason=browser.skip_reason() or "")

VISION, LLM = REPO / "samples" / "data" / "vision", REPO / "samples" / "data" / "llm"


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    with browser.launch(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


@pytest.fixture(scope="module")
def vision_report(tmp_path_factory):
    portrait = loadprobe.analyze([str(VISION)], device="nvidia-l4")
    plan = loadprobe.recommend(portrait)
    html = render_report(portrait, plans=plan_dict(plan), pipeline_yaml=dump(plan.to_pipeline()))
    path = tmp_path_factory.mktemp("report") / "portrait.html"
    write_html(path, html)
    return path


def _figure_ids(path) -> set:
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'<script type="application/json" id="lp-figures">(.*?)</script>', text, re.S).group(1)
    return set(json.loads(blob))


def _assert_clean(visit) -> None:
    assert visit.page.evaluate("document.documentElement.dataset.charts") == "ready"
    assert visit.errors == []
    assert visit.requests == [visit.url], "the report must request nothing but itself"
    assert visit.dialogs == []


def _assert_every_chart_drawn(visit, expected: set) -> None:
    charts = visit.page.evaluate(browser.DRAWN)
    assert {c["id"] for c in charts} == expected
    for chart in charts:
        assert chart["traces"] > 0 and chart["points"] > 0 and chart["drawn"] > 0, chart
        assert chart["label"] and chart["tabindex"] == "0", chart


def test_sample_report_draws_every_chart_offline_at_desktop_and_phone_widths(chromium, vision_report):
    visit = browser.open_report(chromium, vision_report, width=1280)
    page = visit.page
    _assert_clean(visit)
    expected = _figure_ids(vision_report)
    assert {"arrivals", "shares", "latency", "batch", "batch_fit", "devices", "roofline"} <= expected
    _assert_every_chart_drawn(visit, expected)
    desktop = page.screenshot()
    assert browser.pixel_spread(desktop) > 20
    assert browser.background_level(desktop) > 200  # light
    for section in ("headline", "traffic", "shares", "latency", "batch", "devices", "roofline", "bottlenecks",
                    "plan", "quality"):
        assert page.locator(f"section#{section}").count() == 1, section
    clipped = page.evaluate("Array.from(document.querySelectorAll('#plan .table-wrap'))"
                            ".filter(w => w.scrollWidth > w.clientWidth + 1).map(w => w.getAttribute('aria-label'))")
    assert clipped == [], f"tables wider than the page at 1280 px: {clipped}"

    page.set_viewport_size({"width": 390, "height": 844})
    browser.wait_until(page, "Array.from(document.querySelectorAll('[data-figure]'))"
                             ".every(el => el._fullLayout && el._fullLayout.width <= 390)")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, "nothing spills sideways on a phone"
    assert browser.pixel_spread(page.screenshot()) > 20
    assert visit.errors == []
    page.close()


def test_dark_scheme_redraws_the_charts_in_light_text(chromium, vision_report):
    visit = browser.open_report(chromium, vision_report, scheme="dark")
    _assert_clean(visit)
    shot = visit.page.screenshot()
    assert browser.background_level(shot) < 60 and browser.pixel_spread(shot) > 20
    fill = visit.page.evaluate("getComputedStyle(document.querySelector('#chart-latency .xtitle')).fill")
    assert sum(int(v) for v in re.findall(r"\d+", fill)[:3]) > 3 * 180, f"axis title {fill} unreadable on dark"
    visit.page.close()


def test_copy_button_copies_pipeline_yaml(chromium, vision_report):
    visit = browser.open_report(chromium, vision_report)
    page = visit.page
    page.get_by_role("button", name="Copy pipeline.yaml").click()
    browser.wait_until(page, "document.querySelector('.copy-status').textContent.length > 0")
    assert "version: 1" in page.locator("#pipeline-yaml").inner_text()
    assert visit.errors == []
    page.close()


def test_injected_names_stay_text_and_run_nothing(chromium, tmp_path):
    data = tmp_path / "data"
    record_hostile_service(data)
    portrait = loadprobe.analyze([str(data)])
    path = tmp_path / "probe.html"
    write_html(path, render_report(portrait))
    visit = browser.open_report(chromium, path)
    page = visit.page
    _assert_clean(visit)
    assert page.evaluate("document.querySelectorAll('img, svg[onload], [onerror], [onmouseover]').length") == 0
    assert page.evaluate("document.scripts.length") == 4  # data, Plotly's payload, the page script, Plotly
    table = page.locator("section#latency table").inner_text()
    legend = page.evaluate("Array.from(document.querySelectorAll('#chart-latency .legendtext'))"
                           ".map(t => t.textContent)")
    for name in HOSTILE_NAMES:
        assert name in table
        assert name in legend
    page.close()


def test_comparison_report_in_chromium(chromium, tmp_path):
    a = loadprobe.analyze([str(VISION)])
    b = loadprobe.analyze([str(LLM)])
    path = tmp_path / "diff.html"
    write_html(path, render_comparison(a, b, labels=("vision", "llm")))
    visit = browser.open_report(chromium, path)
    _assert_clean(visit)
    _assert_every_chart_drawn(visit, _figure_ids(path))
    rows = visit.page.locator("section#deltas tbody tr").count()
    assert rows >= 10
    assert "latency p95" in visit.page.locator("section#deltas").inner_text()
    assert browser.pixel_spread(visit.page.screenshot()) > 20
    visit.page.close()


def test_simulation_page_in_chromium(chromium, tmp_path):
    from loadprobe.load.schedules import bursty
    from loadprobe.reports.html import write_simulation
    from loadprobe.simulator.compare import simulate_plans

    portrait = loadprobe.analyze([str(VISION)])
    plan = loadprobe.recommend(portrait)
    options = [o for o in [plan.recommended, *plan.alternatives] if o.feasible and o.decisions]
    arrivals = bursty(400, rate=40, on_s=1, off_s=4, duration=20, seed=1)
    comparison = simulate_plans([(o.name, plan.to_pipeline(o)) for o in options], arrivals,
                                source="plans.json", arrivals="bursty", data=str(VISION), portrait=portrait)
    path = tmp_path / "simulation.html"
    write_simulation(comparison.to_dict(), path)
    visit = browser.open_report(chromium, path)
    _assert_clean(visit)
    expected = _figure_ids(path)
    assert "sim_latency" in expected and "sim_queue_0" in expected
    _assert_every_chart_drawn(visit, expected)
    rows = visit.page.locator("section#sim-plans tbody tr").count()
    assert rows == len(options)
    visit.page.close()


def test_energy_section_draws_each_stage_with_bounds_and_the_idle_line(chromium, tmp_path, monkeypatch):
    from ..support.energy import IDLE_W, record

    record(tmp_path, monkeypatch, [(2.5, 0), (2.0, 150)])
    portrait = loadprobe.analyze([tmp_path / "data"])
    path = tmp_path / "portrait.html"
    write_html(path, render_report(portrait))
    visit = browser.open_report(chromium, path, width=1280)
    _assert_clean(visit)
    _assert_every_chart_drawn(visit, _figure_ids(path))
    page = visit.page
    section = page.locator("section#energy")
    assert section.count() == 1
    assert "J per request" in section.inner_text() and "idle power" in section.inner_text()
    bars = page.evaluate("document.querySelector('[data-figure=energy]').data.map(t => [t.x[0], t.error_y.array[0]])")
    assert [name for name, _ in bars] == ["backbone"] and bars[0][1] > 0  # a bar, with its upper bound above it
    idle = page.evaluate("document.querySelector('[data-figure=devices]').data"
                         ".filter(t => t.name.includes(' idle ')).map(t => t.y[0])")
    assert len(idle) == 1 and abs(idle[0] - IDLE_W) < 0.1 * IDLE_W
    page.close()


def test_axes_say_what_they_mean_constant_batch_sub_ms_latency_and_labelled_scores(chromium, tmp_path):
    """A constant batch of 112 gets whole-number ticks (not 111.6 ... 112.4); a latency axis reaching
    below 1 ms labels 0.2 and 0.5 as such (not a bare "2" that reads as 2 ms); each bottleneck's score
    says what it is a share of."""
    import time

    loadprobe.start(tmp_path / "data", service="svc", sample_devices=False)
    for i in range(300):
        with loadprobe.request():
            start = time.perf_counter_ns()
            loadprobe.record_span("tokenize", start, start + 150_000 + (i % 10) * 40_000)
            loadprobe.record_span("embed", start + 600_000, start + 600_000 + 3_000_000 + (i % 7) * 900_000,
                                  batch=112, engine="cpu")
            while time.perf_counter_ns() - start < 5_000_000:
                pass
    loadprobe.stop()
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    path = tmp_path / "portrait.html"
    write_html(path, render_report(portrait))
    visit = browser.open_report(chromium, path, width=1280)
    _assert_clean(visit)
    ticks = lambda chart: visit.page.evaluate(  # noqa: E731
        f"Array.from(document.querySelectorAll('#chart-{chart} .xtick text')).map(t => t.textContent)")
    batch_ticks = ticks("batch")
    assert batch_ticks == ["112"], batch_ticks
    latency_ticks = ticks("latency")
    values = [float(t.replace(",", "")) for t in latency_ticks]
    assert values == sorted(values) and len(set(values)) == len(values), latency_ticks
    assert min(values) < 1 and any(t.startswith("0.") for t in latency_ticks), latency_ticks
    assert all(float(t.replace(",", "")) / 10 ** int(f"{float(t.replace(',', '')):e}".split("e")[1]) in (1, 2, 5)
               for t in latency_ticks), latency_ticks
    scores = visit.page.evaluate("Array.from(document.querySelectorAll('#bottlenecks .score')).map(s => s.textContent)")
    assert scores and all(re.fullmatch(r"\d+% \D{6,}", s.strip()) for s in scores), scores
    visit.page.close()
