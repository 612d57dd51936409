"""The portrait's ``llm`` section: one rule over request spans and token markers, whichever files hold them."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loadprobe
from loadprobe.analysis.timeline import spread_per_second as _spread
from loadprobe.record.probe import record_span
from loadprobe.schema import FIRST_TOKEN, LAST_TOKEN, SPANS, TOKEN

MS = 1_000_000


def _record(folder, requests: int = 3, split: bool = False) -> None:
    """Requests i at i seconds: first token at 100 ms, then 9 tokens 10 ms apart, the end at 200 ms."""
    from time import perf_counter_ns

    loadprobe.start(str(folder), service="llm-engine", sample_devices=False, sample_interpreter=False)
    t0 = perf_counter_ns()
    for i in range(requests):
        start = t0 + i * 1_000 * MS
        root = record_span("generate", start, start + 200 * MS, request_id=f"r{i}", tokens_in=50 + i,
                           tokens_out=10, status="ok" if i else "error")
        record_span(FIRST_TOKEN, start, start + 100 * MS, request_id=f"r{i}", parent=root)
        for k in range(9):
            at = start + 100 * MS + k * 10 * MS
            record_span(TOKEN, at, at + 10 * MS, request_id=f"r{i}", parent=root)
    loadprobe.stop()
    if split:  # the request spans in one file, their markers in another: a long answer outlives a segment
        path = next(folder.rglob("spans-*.parquet"))
        table = pq.read_table(path)
        roots = table.column("parent_id").is_null().to_numpy(zero_copy_only=False)
        pq.write_table(table.filter(pa.array(roots)), path)
        pq.write_table(table.filter(pa.array(~roots)).cast(SPANS), path.with_name("spans-00002.parquet"))


@pytest.mark.parametrize("split, engine", [(False, "inprocess"), (True, "inprocess"), (True, "process")])
def test_request_spans_and_markers_join_across_files_and_processes(tmp_path, split, engine):
    _record(tmp_path, split=split)
    portrait = loadprobe.analyze([tmp_path], engine=engine, workers=2, slo_ttft_ms=150, slo_tpot_ms=20)
    llm = portrait.llm
    assert [stage.name for stage in portrait.stages] == ["generate"]  # markers are no stages
    assert (llm.source, llm.requests) == ("service", 3)
    assert llm.ttft_ms.mean == pytest.approx(100) and llm.ttft_ms.count == 3
    assert llm.tpot_ms.mean == pytest.approx(10) and llm.tpot_ms.p99 == pytest.approx(10)
    assert llm.itl_ms.count == 27 and llm.itl_ms.p50 == pytest.approx(10, rel=1e-3)
    assert llm.e2e_ms.count == 2 and llm.e2e_ms.mean == pytest.approx(200)  # the failed request is not a success
    assert (llm.tokens_in.total, llm.tokens_in.max, llm.tokens_out.total) == (153, 52, 30)
    # 30 tokens over 2.2 s; each second holds one request's 10 tokens
    assert llm.output_tokens_per_s.mean == pytest.approx(30 / 2.2) and llm.output_tokens_per_s.peak == pytest.approx(10)
    assert llm.input_tokens_per_s.peak == pytest.approx(52)
    assert (llm.goodput.requests, llm.goodput.share) == (2, pytest.approx(2 / 3))  # all within, less the failure
    assert llm.goodput.rps == pytest.approx(2 / 2.2)
    tight = loadprobe.analyze([tmp_path], slo_ttft_ms=99).llm.goodput
    assert tight.requests == 0 and tight.derived == ["tpot_ms"]


def test_the_section_round_trips_through_portrait_json(tmp_path):
    _record(tmp_path / "data")
    portrait = loadprobe.analyze([tmp_path / "data"])
    again = loadprobe.Portrait.load(portrait.save(tmp_path / "portrait.json"))
    assert again.to_dict()["llm"] == portrait.to_dict()["llm"] and again.llm.goodput.derived == ["ttft_ms", "tpot_ms"]
    data = json.loads((tmp_path / "portrait.json").read_text())
    data["llm"]["ttft_ms"]["p50"] = "fast"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(loadprobe.LoadprobeError, match=r"field llm.ttft_ms.p50: expected a finite number"):
        loadprobe.Portrait.load(tmp_path / "bad.json")


def test_without_tokens_there_is_no_llm_section(tmp_path):
    loadprobe.start(str(tmp_path), service="vision", sample_devices=False, sample_interpreter=False)
    with loadprobe.request():
        with loadprobe.probe("backbone"):
            pass
    loadprobe.stop()
    assert loadprobe.analyze([tmp_path]).llm is None


def test_an_interval_spreads_its_tokens_over_the_seconds_it_covers():
    out = _spread(np.array([500 * MS]), np.array([3_000 * MS]), np.array([25.0]), 4)
    assert out == pytest.approx([5, 10, 10, 0])
    points = _spread(np.array([1_200 * MS]), np.array([1_200 * MS]), np.array([7.0]), 3)
    assert points == pytest.approx([0, 7, 0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9_000), st.integers(0, 3_000), st.integers(1, 500)), min_size=1,
                max_size=40))
def test_spreading_keeps_every_token_and_each_second_holds_its_share(intervals):
    a = np.array([s for s, _, _ in intervals], dtype=np.int64) * MS
    b = a + np.array([d for _, d, _ in intervals], dtype=np.int64) * MS
    amounts = np.array([n for _, _, n in intervals], dtype=np.float64)
    out = _spread(a, b, amounts, 13)
    assert out.sum() == pytest.approx(amounts.sum())
    expected = np.zeros(13)
    for lo, hi, n in zip(a, b, amounts):  # the same, second by second, by overlap
        if hi == lo:
            expected[lo // (1_000 * MS)] += n
            continue
        for s in range(13):
            overlap = max(0, min(hi, (s + 1) * 1_000 * MS) - max(lo, s * 1_000 * MS))
            expected[s] += n * overlap / (hi - lo)
    assert out == pytest.approx(expected, abs=1e-6)


def _engine_requests(folder, requests, sources=(), hold_s: float = 0.0, markers: bool = True) -> None:
    """An engine's own spans: per request (start, waited, prefill, last output) in ms from now -- the request
    span, its prefill (its queue time the wait for a slot), the first token at the prefill's end, the last
    (``markers``: the first and last token markers)."""
    import time
    from time import perf_counter_ns

    loadprobe.start(str(folder), service="llm-engine", sample_devices=False, sample_interpreter=False,
                    more_sources=list(sources), sample_interval_s=0.1)
    t0 = perf_counter_ns()
    time.sleep(hold_s)  # scraped meanwhile
    for i, (start, waited, prefill, last) in enumerate(requests):
        start, admitted = t0 + start * MS, t0 + (start + waited) * MS
        first = admitted + prefill * MS
        root = record_span("generate", start, t0 + last * MS, request_id=f"r{i}", tokens_in=8, tokens_out=5)
        record_span("prefill", admitted, first, request_id=f"r{i}", parent=root, queue_ns=waited * MS)
        if markers:
            record_span(FIRST_TOKEN, start, first, request_id=f"r{i}", parent=root)
            record_span(LAST_TOKEN, first, t0 + last * MS, request_id=f"r{i}", parent=root)
    loadprobe.stop()


def test_the_engine_s_running_batch_and_queue_are_counted_from_its_spans(tmp_path):
    # running (prefill start -> last output): [0, 100], [50, 150], [100, 200] ms; waiting: [10, 50], [20, 100]
    _engine_requests(tmp_path, [(0, 0, 50, 100), (10, 40, 50, 150), (20, 80, 50, 200)])
    engine = loadprobe.analyze([tmp_path]).llm.engine
    assert (engine.running.source, engine.waiting.source, engine.kv_cache_pct) == ("spans", "spans", None)
    assert engine.running.mean == pytest.approx(300 / 200) and engine.running.peak == 2  # one ends as one starts
    assert engine.waiting.mean == pytest.approx((0 + 40 + 80) / 200) and engine.waiting.peak == 2
    # the series for the report: everything within one second, its mean over that second
    assert engine.series.bucket_s == 1 and sum(engine.series.running) == pytest.approx(0.3)
    assert sum(engine.series.waiting) == pytest.approx(0.12)


@pytest.mark.timeout(60)
def test_the_engine_s_scraped_gauges_are_its_load_summed_over_its_endpoints(tmp_path):
    prometheus_client = pytest.importorskip("prometheus_client")
    from loadprobe.record.scrape import ScrapeSource
    from tests.record.test_scrape import free_port

    servers, urls = [], []
    for running, waiting, kv in ((3, 1, 0.25), (2, 0, 0.75)):  # two engines (vLLM's names)
        registry = prometheus_client.CollectorRegistry()
        for name, value in (("num_requests_running", running), ("num_requests_waiting", waiting),
                            ("kv_cache_usage_perc", kv)):
            prometheus_client.Gauge(f"vllm:{name}", name, ["model_name"], registry=registry).labels("m").set(value)
        port = free_port()
        servers.append(prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry))
        urls.append(f"http://127.0.0.1:{port}/metrics")
    try:
        # no first token timed: the spans cannot tell when a request ran, the gauges can
        _engine_requests(tmp_path / "untimed", [(0, 5, 50, 1_500)], [ScrapeSource(url, 0.1) for url in urls],
                         hold_s=1.6, markers=False)
        _engine_requests(tmp_path / "timed", [(0, 500, 100, 1_500)], [ScrapeSource(url, 0.1) for url in urls],
                         hold_s=1.6)
    finally:
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join(5)
    engine = loadprobe.analyze([tmp_path / "untimed"]).llm.engine
    assert (engine.running.mean, engine.running.peak, engine.running.source) == (5, 5, "scraped")
    assert (engine.waiting.mean, engine.waiting.peak) == (1, 1)
    assert (engine.kv_cache_pct.mean, engine.kv_cache_pct.peak) == (pytest.approx(50), pytest.approx(50))
    assert engine.series is None  # the scraped series are drawn from the timeline
    # where the engine's spans time its requests, they count its running and waiting requests (exact, where
    # readings are samples); the KV cache, which no span shows, still comes from its gauges
    engine = loadprobe.analyze([tmp_path / "timed"]).llm.engine
    assert (engine.running.source, engine.waiting.source, engine.kv_cache_pct.source) == ("spans", "spans", "scraped")
    assert engine.running.mean == pytest.approx(1_000 / 1_500) and engine.waiting.mean == pytest.approx(500 / 1_500)
    assert engine.kv_cache_pct.mean == pytest.approx(50) and engine.series is not None
