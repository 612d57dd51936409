"""Prometheus endpoints scraped into samples: pages served by the real prometheus_client over HTTP,
read by ScrapeSource; figures checked against what was observed between two scrapes; and
``loadprobe record --scrape`` putting an engine's series on the portrait."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

import loadprobe
from loadprobe.record.scrape import ScrapeSource, bucket_quantile, parse

prometheus_client = pytest.importorskip("prometheus_client")

pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def engine():
    """An engine's metrics: a gauge, a labelled counter, a histogram and a summary, served over HTTP."""
    registry = prometheus_client.CollectorRegistry()
    metrics = {
        "running": prometheus_client.Gauge("engine:num_requests_running", "running", ["model_name"], registry=registry),
        "tokens": prometheus_client.Counter("engine:generation_tokens", "tokens", ["model_name"], registry=registry),
        "ttft": prometheus_client.Histogram("engine:time_to_first_token_seconds", "ttft", ["model_name"],
                                            buckets=(0.01, 0.02, 0.05, 0.1, 0.5), registry=registry),
        "e2e": prometheus_client.Summary("engine:e2e_seconds", "e2e", registry=registry),
    }
    port = free_port()
    server, thread = prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry)
    yield metrics, f"http://127.0.0.1:{port}/metrics"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_scraped_series_are_what_happened_between_two_scrapes(engine):
    metrics, url = engine
    metrics["running"].labels("tiny").set(3)
    metrics["tokens"].labels("tiny").inc(1000)
    over_http = ScrapeSource(url, interval_s=0.01).read()
    assert ("scrape:" + url.split("/")[2], 'engine:num_requests_running{model_name="tiny"}', 3.0) in over_http
    assert not any(":per_s" in metric for _, metric, _ in over_http)  # a rate needs two pages

    source = ScrapeSource(url)  # pages read at known times: the figures are exact
    source.readings(parse(_page(url)), 100.0)
    observed = [0.012, 0.015, 0.018, 0.03, 0.04, 0.07]
    for value in observed:
        metrics["ttft"].labels("tiny").observe(value)
        metrics["e2e"].observe(value * 10)
    metrics["tokens"].labels("tiny").inc(500)
    metrics["running"].labels("tiny").set(5)
    second = {metric: value for _, metric, value in source.readings(parse(_page(url)), 102.0)}
    assert second['engine:num_requests_running{model_name="tiny"}'] == 5
    assert second['engine:generation_tokens_total:per_s{model_name="tiny"}'] == pytest.approx(250.0)
    assert second['engine:time_to_first_token_seconds:mean{model_name="tiny"}'] == pytest.approx(
        sum(observed) / len(observed))
    assert second['engine:time_to_first_token_seconds:count_per_s{model_name="tiny"}'] == pytest.approx(3.0)
    # 6 observations: 3 in (0.01, 0.02], 2 in (0.02, 0.05], 1 in (0.05, 0.1]; the median is the 3rd: 0.02
    assert second['engine:time_to_first_token_seconds:p50{model_name="tiny"}'] == pytest.approx(0.02)
    assert second["engine:e2e_seconds:mean"] == pytest.approx(10 * sum(observed) / len(observed))
    third = {metric for _, metric, _ in source.readings(parse(_page(url)), 103.0)}
    assert not any("time_to_first_token_seconds:mean" in metric for metric in third)  # nothing observed since


def test_a_real_default_page_parses():
    families = parse(prometheus_client.generate_latest(prometheus_client.REGISTRY).decode())
    assert families and all(family.samples for family in families.values())


def _page(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def test_text_format_details():
    families = parse(textwrap.dedent('''\
        # HELP x_total a counter
        # TYPE x_total counter
        x_total{path="/a\\"b",code="200"} 7 1700000000000
        # TYPE g gauge
        g NaN
        g{k="v"} +Inf
        untyped_thing{a="1"} 2.5
        bad line here
        # TYPE h histogram
        h_bucket{le="1"} 1
        h_bucket{le="+Inf"} 2
        h_sum 3
        h_count 2
        '''))
    assert families["x_total"].samples == [("x_total", (("code", "200"), ("path", '/a"b')), 7.0)]
    assert families["h"].type == "histogram" and len(families["h"].samples) == 4
    assert families["untyped_thing"].type == "untyped"
    assert bucket_quantile(0.5, [(1.0, 1.0), (float("inf"), 2.0)]) == 1.0
    assert bucket_quantile(0.99, [(1.0, 1.0), (float("inf"), 2.0)]) == 1.0  # past the last finite bound
    assert bucket_quantile(0.5, [(2.0, 4.0)]) == pytest.approx(1.0)


def test_a_counter_that_went_down_gives_no_rate():
    source = ScrapeSource("http://127.0.0.1:1/metrics")
    page = "# TYPE c counter\nc_total 100\n"
    source.readings(parse(page), 10.0)
    assert source.readings(parse("# TYPE c counter\nc_total 5\n"), 11.0) == []
    assert source.readings(parse("# TYPE c counter\nc_total 15\n"), 12.0) == [
        ("scrape:127.0.0.1:1", "c_total:per_s", 10.0)]


SERVICE = """
import time
import loadprobe
for i in range(30):
    with loadprobe.request():
        with loadprobe.probe("step"):
            time.sleep(0.05)
"""


def test_record_scrape_puts_the_engine_series_on_the_portrait(engine, tmp_path):
    metrics, url = engine
    metrics["running"].labels("tiny").set(4)
    out = subprocess.run([sys.executable, "-m", "loadprobe", "record", "--no-devices", "--scrape", url, "--every",
                          "0.2", "-o", str(tmp_path / "data"), "--", sys.executable, "-c", SERVICE],
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    scraped = {m.metric: m for m in portrait.devices.metrics if m.device.startswith("scrape:")}
    assert scraped['engine:num_requests_running{model_name="tiny"}'].mean == 4
    frame = loadprobe.read_samples([str(tmp_path / "data")])
    assert (frame["metric"] == 'engine:num_requests_running{model_name="tiny"}').sum() >= 3
    # on the report's device chart: the engine's running requests in a panel of their own
    from loadprobe.reports.figures import device_timeline

    charted = {s.metric for s in portrait.timeline.device_series if s.device.startswith("scrape:")}
    assert charted == {'engine:num_requests_running{model_name="tiny"}'}  # not counters, not histograms
    chart = device_timeline(portrait)
    titles = [value["title"]["text"] for key, value in chart["layout"].items() if key.startswith("yaxis")]
    assert "engine requests" in titles


def test_scrape_with_otlp_and_no_command_needs_a_service(tmp_path):
    out = subprocess.run([sys.executable, "-m", "loadprobe", "record", "--otlp", "127.0.0.1:0", "--scrape",
                          "http://127.0.0.1:1/metrics", "-o", str(tmp_path / "d")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "needs --service NAME" in out.stderr


def test_load_scrape_records_the_servers_series_beside_the_client_view(engine, tmp_path):
    """``loadprobe load --record --scrape``: an engine with no probes of its own, seen from both sides."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    metrics, url = engine
    metrics["running"].labels("tiny").set(2)

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = subprocess.run([sys.executable, "-m", "loadprobe", "load", f"http://127.0.0.1:{server.server_port}/",
                              "--rate", "20", "--duration", "2", "--record", str(tmp_path / "data"), "--scrape", url,
                              "--every", "0.2"], capture_output=True, text=True, timeout=90)
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 0, out.stderr
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    assert portrait.requests.count == 40
    scraped = {m.metric: m.mean for m in portrait.devices.metrics if m.device.startswith("scrape:")}
    assert scraped['engine:num_requests_running{model_name="tiny"}'] == 2
    refused = subprocess.run([sys.executable, "-m", "loadprobe", "load", "http://127.0.0.1:1/", "--rate", "1",
                              "--duration", "1", "--scrape", url], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "give --record DIR too" in refused.stderr


def test_a_scraped_endpoint_is_read_when_sampling_starts_and_when_it_stops(engine):
    """A run's first and last pages bound its counters and histograms, whatever the interval."""
    import time

    from loadprobe.record.samplers import Sampler

    metrics, url = engine
    metrics["tokens"].labels("tiny").inc(10)
    sampler = Sampler([ScrapeSource(url, interval_s=30)], interval_s=30)
    sampler.start()
    time.sleep(0.5)
    metrics["tokens"].labels("tiny").inc(90)
    sampler.stop()
    rates = [value for _, _, metric, value in sampler.drain() if metric.startswith("engine:generation_tokens_total:per_s")]
    assert len(rates) == 1 and rates[0] > 90  # 90 tokens over the ~0.5 s between the first page and the last


def test_exemplars_and_created_series(engine):
    families = parse('# TYPE h histogram\nh_bucket{le="1.0"} 5 # {trace_id="x"} 0.5\nh_bucket{le="+Inf"} 6\n'
                     'h_count 6\nh_sum 3\nh_created 1.7e9\n# TYPE g_created gauge\ng_created 1.7e9\n')
    assert [name for name, _, _ in families["h"].samples] == ["h_bucket", "h_bucket", "h_count", "h_sum"]
    assert "g_created" not in families


def test_every_takes_durations():
    from loadprobe.cli._types import Seconds

    seconds = Seconds(minimum=0.05)
    assert [seconds.convert(v, None, None) for v in ("1", "1s", "500ms", "2m", 0.25)] == [1.0, 1.0, 0.5, 120.0, 0.25]
    for bad in ("fast", "10ms", "-1s"):
        with pytest.raises(Exception):
            seconds.convert(bad, None, None)
