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
from loadprobe.analysis.llm import _spread
from loadprobe.record.probe import record_span
from loadprobe.schema import FIRST_TOKEN, SPANS, TOKEN

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
