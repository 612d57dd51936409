"""``loadprobe analyze`` on real recordings: figures, exact merging, engines, bad input."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import loadprobe
from loadprobe import probe, request
from loadprobe._errors import LoadprobeError
from loadprobe.analysis import map_step
from loadprobe.analysis.dataset import discover, file_refs
from loadprobe.analysis.finalize import build_portrait
from loadprobe.analysis.kernels import kernel_available
from loadprobe.analysis.map_step import map_file
from loadprobe.analysis.partials import merge
from loadprobe.schema import SPANS

from ..conftest import REPO


def record_pipeline(out: Path, requests: int = 600, service: str = "vision") -> Path:
    """A real recording: requests through decode -> backbone (batched, fixed shape) -> nms (dynamic)."""
    rec = loadprobe.start(out, service=service, sample_interval_s=0.05, flush_interval_s=0.05, rotate_bytes=8_000)

    @probe("decode", engine="cpu")
    def decode(i):
        return sum(range(200 + i % 50))

    @probe("backbone", batch=lambda i, b: b, shape=(4, 3, 64, 64), engine="npu", flops=lambda i, b: 1e9 * b,
           bytes=lambda i, b: 2e7)
    def backbone(i, b):
        time.sleep(0.001 * b)

    def nms(i):
        with probe("nms") as span:
            span.shape = (i % 17 + 1, 4)
            span.batch = i % 17 + 1
            if i % 100 == 99:
                raise ValueError("bad box")

    for i in range(requests):
        try:
            with request():
                decode(i)
                backbone(i, 1 + i % 4)
                nms(i)
        except ValueError:
            pass
    loadprobe.stop()
    return rec.run_dir


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    record_pipeline(out)
    return out


def _comparable(portrait) -> dict:
    data = portrait.to_dict()
    data.pop("generated_at")
    return data


def test_portrait_figures_of_a_recording(recorded):
    p = loadprobe.analyze([recorded], device="nvidia-l4")
    assert p.requests.count == 600 and p.traffic.requests == 600 and p.traffic.source == "requests"
    names = {s.name for s in p.stages}
    assert names == {"request", "decode", "backbone", "nms"}
    backbone, nms, request_stage = p.stage("backbone"), p.stage("nms"), p.stage("request")
    assert backbone.count == 600 and backbone.batch.max == 4 and backbone.batch.p50 in (2, 3)
    assert 0.7 < backbone.batch.fit.b_ms_per_item < 1.6 and backbone.batch.fit.r2 is not None  # 1 ms per item
    assert backbone.shapes.distinct == 1 and not backbone.shapes.dynamic_shape
    assert nms.shapes.distinct == 17 and nms.shapes.dynamic_shape
    assert nms.error_rate == pytest.approx(0.01)
    assert p.requests.error_rate == pytest.approx(0.01)
    assert backbone.intensity.flops_per_byte == pytest.approx(125.0)
    assert backbone.intensity.roofline.device == "nvidia-l4"
    shares = sum(s.self_share for s in p.stages)
    assert shares == pytest.approx(1.0, abs=0.02)  # self shares and unattributed time cover the requests
    assert request_stage.self_share == pytest.approx(p.requests.unattributed_share)
    lat = backbone.latency_ms
    assert lat.p50 <= lat.p90 <= lat.p95 <= lat.p99 <= lat.p999 <= lat.max
    assert {m.device for m in p.devices.metrics} >= {"cpu", "process"}
    assert any(u.stage == "backbone" and u.device == "cpu" for u in p.devices.utilisation_by_stage)
    assert any(v.kind == "dynamic_shapes" and v.evidence["stage"] == "nms" for v in p.bottlenecks)
    q = p.data_quality
    assert q.files_read > 2 and not q.files_skipped and q.hosts and q.services == ["vision"]


def test_every_field_of_a_portrait_is_defined_in_metrics_md(recorded):
    # docs/metrics.md names each field in backticks; maps keyed by data (batch sizes, engines,
    # statuses, precisions, hosts, devices) are defined as a whole.
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    named = {w for quoted in re.findall(r"`([^`]+)`", doc) for w in re.split(r"[^A-Za-z0-9_]+", quoted) if w}
    keyed_by_data = {"distribution", "engines", "statuses", "peak_flops_per_s", "idle_share", "dispersion_index",
                     "host_hardware"}
    undefined = set()

    def walk(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                if path and path[-1] in keyed_by_data:
                    continue
                if key not in named and not (path[-1:] == ["evidence"] and key.endswith("_util_pct")):
                    undefined.add(".".join([*path, key]))
                walk(item, [*path, key])
        elif isinstance(value, list):
            for item in value:
                walk(item, path)

    portrait = loadprobe.analyze([recorded], device="nvidia-l4").to_dict()
    assert portrait["bottlenecks"] and portrait["devices"]["metrics"] and portrait["timeline"]
    walk(portrait, [])
    assert not undefined, f"fields of portrait.json missing from docs/metrics.md: {sorted(undefined)}"


def test_exact_durations_agree_with_the_raw_spans(recorded):
    import numpy as np

    rows = pa.concat_tables([pq.read_table(f) for f in recorded.rglob("spans-*.parquet")])
    durations = np.sort(np.array([r["dur_ns"] for r in rows.to_pylist() if r["stage"] == "decode"]))
    p = loadprobe.analyze([recorded])
    for pct, got in ((50, p.stage("decode").latency_ms.p50), (99, p.stage("decode").latency_ms.p99)):
        truth = durations[max(1, int(pct / 100 * len(durations) + 0.5)) - 1]
        assert truth <= round(got * 1e6) <= truth * 1.001 + 1


def test_partials_merged_in_any_order_and_split_give_identical_portraits(recorded):
    runs, skipped = discover([recorded])
    refs = file_refs(runs)
    parts = [map_file(r) for r in refs]
    reference = build_portrait(merge(parts), runs, inputs=["x"], dataset_skipped=skipped)
    for seed in range(3):
        shuffled = parts[:]
        random.Random(seed).shuffle(shuffled)
        # merge in uneven groups, then merge the groups: any tree gives the same result
        groups = [merge(shuffled[i:i + 1 + seed]) for i in range(0, len(shuffled), 1 + seed)]
        again = build_portrait(merge(groups), runs, inputs=["x"], dataset_skipped=skipped)
        assert _comparable(again) == _comparable(reference)


def test_process_pool_and_dask_give_identical_portraits(recorded):
    pytest.importorskip("dask.distributed")
    inprocess = loadprobe.analyze([recorded])
    pooled = loadprobe.analyze([recorded], engine="process", workers=2)
    dask = loadprobe.analyze([recorded], engine="dask", workers=2)
    assert _comparable(pooled) == _comparable(inprocess) == _comparable(dask)


def test_fsspec_uris_read_like_local_paths(recorded, tmp_path):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for path in recorded.rglob("*"):
        if path.is_file():
            fs.pipe(f"/bucket/{path.relative_to(recorded)}", path.read_bytes())
    remote = loadprobe.analyze(["memory://bucket"])
    local = loadprobe.analyze([recorded])
    a, b = _comparable(remote), _comparable(local)
    a.pop("inputs"), b.pop("inputs")
    a["data_quality"].pop("files_skipped"), b["data_quality"].pop("files_skipped")
    assert a == b


def test_time_service_and_host_filters(recorded):
    full = loadprobe.analyze([recorded])
    assert len(full.traffic.series) >= 2
    early = loadprobe.analyze([recorded], until=full.traffic.series[1][0])  # the first second only
    assert 0 < early.requests.count < full.requests.count
    assert early.data_quality.rows_filtered > 0
    with pytest.raises(LoadprobeError, match="no loadprobe data"):
        loadprobe.analyze([recorded], service="nothing-*")
    assert loadprobe.analyze([recorded], host=full.data_quality.hosts[0]).requests.count == 600
    with pytest.raises(LoadprobeError, match="not before"):
        loadprobe.analyze([recorded], since="2030-01-01", until="2029-01-01")


def test_portrait_json_round_trips(recorded, tmp_path):
    p = loadprobe.analyze([recorded])
    path = p.save(tmp_path / "out" / "portrait.json")
    loaded = loadprobe.Portrait.load(path)
    assert loaded.to_dict() == p.to_dict()
    data = json.loads(path.read_text())
    data["version"] = "2.0"
    (tmp_path / "new.json").write_text(json.dumps(data))
    with pytest.raises(LoadprobeError, match="newer"):
        loadprobe.Portrait.load(tmp_path / "new.json")


def _digest(root: Path) -> dict:
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_bad_files_are_skipped_with_reasons_and_the_input_is_never_modified(recorded, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(recorded, data)
    run_dir = next(data.glob("*/*/*"))
    (run_dir / "spans-09001.parquet").write_text("this is not parquet")
    good = next(run_dir.glob("spans-*.parquet"))
    blob = good.read_bytes()
    (run_dir / "spans-09002.parquet").write_bytes(blob[: len(blob) // 2])
    table = pq.read_table(good)
    newer = table.replace_schema_metadata({b"loadprobe.schema": b"spans/2.0"})
    pq.write_table(newer, run_dir / "spans-09003.parquet")
    negative = table.set_column(1, "dur_ns", pa.array([-5] * table.num_rows, pa.int64()))
    pq.write_table(negative.cast(SPANS), run_dir / "spans-09004.parquet")
    (run_dir / "notes.txt").write_text("hello")
    before = _digest(data)
    p = loadprobe.analyze([data])
    assert _digest(data) == before
    reasons = {Path(s["path"]).name: s["reason"] for s in p.data_quality.files_skipped}
    assert "truncated or not a Parquet file" in reasons["spans-09001.parquet"]
    assert "truncated or not a Parquet file" in reasons["spans-09002.parquet"]
    assert "newer" in reasons["spans-09003.parquet"]
    assert reasons["notes.txt"] == "not loadprobe data"
    assert p.data_quality.negative_durations == table.num_rows
    assert any("negative" in w for w in p.data_quality.warnings)
    assert p.requests.count == 600  # the good files still count, once


def _write_spans(path: Path, rows: list[dict], host: str, run: str) -> None:
    d = path / host / "svc" / run
    d.mkdir(parents=True)
    cols = {f.name: [r.get(f.name) for r in rows] for f in SPANS}
    table = pa.table({k: pa.array(v, SPANS.field(k).type.value_type if pa.types.is_dictionary(SPANS.field(k).type)
                                  else SPANS.field(k).type) for k, v in cols.items()}).cast(SPANS)
    pq.write_table(table.replace_schema_metadata(SPANS.metadata), d / "spans-00001.parquet")
    (d / "run.json").write_text(json.dumps({"schema": "run/1.0", "host": host, "service": "svc", "run_id": run}))


def test_hosts_with_skewed_clocks_are_reported(tmp_path):
    base = 1_800_000_000 * 10**9
    roots, children = [], []
    for n in range(400):
        rid = f"req-{n:05d}"
        start = base + n * 10_000_000
        roots.append({"ts_ns": start, "dur_ns": 8_000_000, "stage": "request", "span_id": n + 1, "request_id": rid,
                      "status": "ok"})
        # host b's clock runs 2 s ahead: its half of each request seems to happen after the request ended
        children.append({"ts_ns": start + 1_000_000 + 2 * 10**9, "dur_ns": 5_000_000, "stage": "model",
                         "span_id": n + 1, "parent_id": n + 1, "request_id": rid, "status": "ok"})
    _write_spans(tmp_path, roots, "a", "1-a")
    _write_spans(tmp_path, children, "b", "2-b")
    warnings = loadprobe.analyze([tmp_path]).data_quality.clock_warnings
    assert len(warnings) == 1 and "host b" in warnings[0] and "host a" in warnings[0]
    assert "1999" in warnings[0] or "2000" in warnings[0] or "1998" in warnings[0]


def cli(*args, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    return subprocess.run([sys.executable, "-m", "loadprobe", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_cli_writes_portrait_json_prints_a_summary_and_json(recorded, tmp_path):
    done = cli("analyze", str(recorded), "-o", str(tmp_path / "report"), "--device", "nvidia-l4")
    assert done.returncode == 0, done.stderr
    assert "backbone" in done.stdout and "bottlenecks:" in done.stdout
    assert (tmp_path / "report" / "portrait.json").exists()
    as_json = cli("analyze", str(recorded), "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout)["requests"]["count"] == 600
    assert (tmp_path / "loadprobe-report" / "portrait.json").exists()


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "spans-00001.parquet").write_text("nope")
    cases = [
        ([str(tmp_path / "empty")], "no loadprobe data"),
        ([str(tmp_path / "missing")], "no such file"),
        ([str(tmp_path / "junk")], "no readable span data"),
        ([str(tmp_path / "junk"), "--since", "yesterday"], "--since"),
        ([str(tmp_path / "junk"), "--device", "nvidia-l5"], None),
    ]
    for args, expected in cases:
        done = cli("analyze", *args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        if expected:
            assert expected in done.stderr


VISION_RUN = next((REPO / "samples" / "data" / "vision").glob("*/*/*"))


def test_a_spans_file_with_text_durations_is_skipped_naming_it_and_the_column(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(VISION_RUN, data / "vm" / "vision" / "1")
    bad = data / "vm" / "vision" / "2" / "spans-00001.parquet"
    bad.parent.mkdir(parents=True)
    table = pq.read_table(VISION_RUN / "spans-00001.parquet")
    texts = pa.array([f"{n}ms" for n in table.column("dur_ns").to_pylist()])
    pq.write_table(table.set_column(table.schema.get_field_index("dur_ns"), "dur_ns", texts), bad)
    done = cli("analyze", str(data), "-o", str(tmp_path / "out"), "--no-html")
    assert done.returncode == 0, done.stderr
    assert f"{bad}: column 'dur_ns' holds string, expected int64" in done.stdout
    quality = json.loads((tmp_path / "out" / "portrait.json").read_text())["data_quality"]
    assert quality["files_skipped"] == [{"path": str(bad), "reason": "column 'dur_ns' holds string, expected int64"}]
    assert quality["rows"] == table.num_rows  # the good file is analysed


@pytest.mark.parametrize("damage, why", [
    ("truncate", "truncated or not a Parquet file"),
    ("schema", "missing column(s)"),
    ("newer", "written with data format 2.0, newer than this loadprobe reads (1.1); upgrade loadprobe"),
])
def test_a_run_whose_only_spans_file_is_unusable_exits_2_naming_it(tmp_path, damage, why):
    run = tmp_path / "data" / "vm" / "vision" / "1"
    shutil.copytree(VISION_RUN, run)  # its run.json and device samples stay readable
    spans = run / "spans-00001.parquet"
    if damage == "truncate":
        spans.write_bytes(spans.read_bytes()[:5000])
    elif damage == "schema":
        pq.write_table(pa.table({"a": [1, 2]}), spans)
    else:
        table = pq.read_table(spans)
        pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"loadprobe.schema": b"spans/2.0"}),
                       spans)
    done = cli("analyze", str(tmp_path / "data"), "-o", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "no readable span data" in done.stderr and f"{spans}: {why}" in done.stderr
    assert not (tmp_path / "out").exists()


def test_many_unusable_files_are_named_a_few_then_counted(tmp_path):
    for n in range(1, 6):
        run = tmp_path / "data" / "h" / "s" / str(n)
        run.mkdir(parents=True)
        (run / "spans-00001.parquet").write_text("nope")
    done = cli("analyze", str(tmp_path / "data"), "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and "5 file(s) skipped" in done.stderr
    assert done.stderr.count("truncated or not a Parquet file") == 3 and "and 2 more" in done.stderr


def test_a_run_json_with_fields_of_the_wrong_type_is_set_aside(tmp_path):
    run = tmp_path / "data" / "vm" / "vision" / "1"
    shutil.copytree(VISION_RUN, run)
    info = json.loads((run / "run.json").read_text())
    info["counters"], info["hardware"]["cpu"]["logical_cores"] = [1], "2"
    (run / "run.json").write_text(json.dumps(info))
    p = loadprobe.analyze([tmp_path / "data"])
    [skipped] = p.data_quality.files_skipped
    assert skipped["path"].endswith("run.json") and "field counters" in skipped["reason"]
    assert p.requests.count > 0 and p.data_quality.host_hardware == {}


SHARED_TRACES = REPO.parent / "shared" / "traces"


def test_real_traces_import_and_analyse_with_sane_figures(tmp_path):
    from loadprobe.record.importer import import_log

    code = import_log(REPO / "samples" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv",
                      tmp_path / "code", preset="azure-llm-2023")
    p = loadprobe.analyze([tmp_path / "code"])
    t = p.traffic
    assert t.requests == code.rows == 8819 and t.bucket_s == 1
    assert 3000 < t.duration_s < 3700  # one hour of traffic
    # (over the whole seconds between the first and the last arrival's: within a request of the plain mean)
    assert t.mean_rps == pytest.approx(8819 / t.duration_s, rel=0.001)
    assert t.peak_to_mean > 5 and t.interarrival_cv > 1 and t.dispersion_index["1s"] > 2  # "very bursty"
    tokens = p.stage("request").tokens_in
    assert tokens.count == 8819 and 100 < tokens.p50 < tokens.p99 <= tokens.max < 100_000
    assert p.requests.latency_ms is None and p.data_quality.null_durations == 8819
    assert any(v.kind == "bursty_arrivals" for v in p.bottlenecks)

    conv_csv = SHARED_TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    if not conv_csv.exists():
        pytest.skip("shared/traces is not beside this checkout")
    import_log(conv_csv, tmp_path / "conv", preset="azure-llm-2023")
    conv = loadprobe.analyze([tmp_path / "conv"]).traffic
    assert conv.requests == 19366
    assert conv.dispersion_index["1s"] < t.dispersion_index["1s"]  # conv is close to Poisson, code is bursty
    assert conv.interarrival_cv < t.interarrival_cv
    import_log(SHARED_TRACES / "mooncake_fast25" / "conversation_trace.jsonl", tmp_path / "moon", preset="mooncake")
    moon = loadprobe.analyze([tmp_path / "moon"])
    assert moon.traffic.requests == 12031 and moon.stage("request").tokens_out.count == 12031


def test_a_crashed_runs_unfinished_stream_is_analysed_without_touching_it(tmp_path):
    from ..conftest import record_and_crash

    record_and_crash(tmp_path, 300)
    (stream,) = tmp_path.glob("*/svc/*/.spans-*.arrows")
    before = _digest(tmp_path)
    p = loadprobe.analyze([tmp_path])
    assert p.requests.count == 300 and p.stage("x").count == 300
    assert _digest(tmp_path) == before  # analysis reads the stream, it does not finish it


@pytest.mark.parametrize("kernel", ["numpy", "c"])
def test_nested_stages_are_ordered_from_the_request_start(tmp_path, kernel):
    import time as _time

    if kernel == "c" and not kernel_available():
        pytest.skip("the C map kernel was not built here")
    out = tmp_path / "data"
    loadprobe.start(out, service="nest", sample_devices=False)
    try:
        for i in range(20):
            with loadprobe.request(id=f"r{i}"):
                with loadprobe.Span("prep"):
                    _time.sleep(0.003)
                with loadprobe.Span("model"):
                    _time.sleep(0.001)
                    with loadprobe.Span("conv"):  # 1 ms into model, 4 ms into the request
                        _time.sleep(0.001)
    finally:
        loadprobe.stop()
    portrait = loadprobe.analyze([str(out)], kernel=kernel)
    offsets = {s.name: s.start_offset_ms for s in portrait.stages}
    assert offsets["prep"] < offsets["model"] < offsets["conv"]
    assert offsets["conv"] >= 3.5  # from the request's start, not from model's


@pytest.mark.parametrize("kernel", ["numpy", "c"])
def test_queue_time_a_stage_records_is_not_its_parents_own_time(tmp_path, kernel):
    if kernel == "c" and not kernel_available():
        pytest.skip("the C map kernel was not built here")
    base = 1_800_000_000 * 10**9
    rows = []
    for n in range(50):  # 10 ms requests: 3 ms waiting in a batcher, then a 4 ms batched stage
        rid, root = f"req-{n}", 2 * n + 1
        start = base + n * 20_000_000
        rows.append({"ts_ns": start, "dur_ns": 10_000_000, "stage": "request", "span_id": root, "request_id": rid,
                     "status": "ok"})
        rows.append({"ts_ns": start + 4_000_000, "dur_ns": 4_000_000, "stage": "backbone", "span_id": root + 1,
                     "parent_id": root, "request_id": rid, "status": "ok", "queue_ns": 3_000_000 if n % 2 else None})
    _write_spans(tmp_path, rows, "a", "1-a")
    p = loadprobe.analyze([tmp_path], kernel=kernel)
    assert p.stage("backbone").self_share == pytest.approx(0.4)
    assert p.requests.queued_share == pytest.approx(0.15)  # half the requests recorded 3 ms of 10
    assert p.requests.unattributed_share == pytest.approx(0.45)
    assert p.stage("backbone").self_share + p.requests.queued_share + p.requests.unattributed_share == pytest.approx(1)


def test_a_failing_file_stops_the_threaded_map_without_mapping_the_rest(monkeypatch):
    calls = []

    def fake_map_file(ref, filters, window, into=None):
        calls.append(ref)
        time.sleep(0.01)
        if ref == 3:
            raise RuntimeError("boom")
        return into

    monkeypatch.setattr(map_step, "map_file", fake_map_file)
    with pytest.raises(RuntimeError, match="boom"):
        map_step.map_files([(i, None) for i in range(200)], threads=2)
    assert 4 <= len(calls) < 20  # the files not started when it failed were dropped, not mapped


@pytest.mark.parametrize("process", ["constant", "poisson"])
def test_the_part_filled_first_and_last_seconds_do_not_bend_the_rates(tmp_path, process):
    """Traffic starts and ends inside a second: a constant 80 req/s from 0.5 s to 30.5 s read 76 req/s, a valley
    of 40 and a dispersion of 3 with those two half-seconds counted as whole ones."""
    import numpy as np

    from tests.support.served_recording import Step, record_served

    rng = np.random.default_rng(3)
    arrivals = (0.5 + np.arange(2400) / 80.0 if process == "constant"
                else 0.5 + np.sort(rng.uniform(0, 30.0, 2400)))  # Poisson: uniform given the count
    record_served(tmp_path / "data", arrivals, [Step("request", lambda r, n: np.full(n, 0.1)),
                                                Step("work", lambda r, n: np.full(n, 1.0))], cores=2)
    traffic = loadprobe.analyze([tmp_path / "data"]).traffic
    assert traffic.requests == 2400
    assert traffic.mean_rps == pytest.approx(80.0, rel=0.04)
    if process == "constant":
        assert traffic.valley_window.rate_per_s >= 79 and traffic.peak_rps <= 81
        assert traffic.dispersion_index["1s"] < 0.1
    else:
        assert 0.5 < traffic.dispersion_index["1s"] < 1.6


def test_arrivals_only_in_the_edge_seconds_keep_a_mean_rate():
    from loadprobe.analysis.traffic import build_traffic

    traffic = build_traffic({100: 5, 110: 7}, "requests", [])  # two bursts, nothing between them
    assert traffic.mean_rps == pytest.approx(12 / 11) and traffic.peak_to_mean == pytest.approx(7 / (12 / 11))


def test_a_request_every_few_seconds_keeps_its_edges():
    from loadprobe.analysis.traffic import build_traffic

    traffic = build_traffic({0: 1, 10: 1, 20: 1}, "requests", [])  # each edge second holds a whole request
    assert traffic.mean_rps == pytest.approx(3 / 21)
