"""Issue #22.2: recordings and portraits as pandas DataFrames, from real recordings; pandas never on the service path."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import loadprobe

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    root = tmp_path_factory.mktemp("frames") / "data"
    loadprobe.start(root, service="frames", sample_devices=True, sample_interval_s=0.2, flush_interval_s=0.1)
    for i in range(200):
        with loadprobe.request(id=f"r{i}"):
            t = time.perf_counter_ns()
            loadprobe.record_span("decode", t, t + 1_000_000, engine="cpu")
            loadprobe.record_span("backbone", t + 1_000_000, t + 3_000_000 + i * 1000, engine="gpu0", batch=1 + i % 4,
                                  shape=(3, 224, 224), flops=1e9, bytes=1e7)
    time.sleep(0.6)  # a few device samples
    stats = loadprobe.stop()
    return root, stats


def test_read_spans_gives_every_written_span_with_times_in_milliseconds(recording):
    root, stats = recording
    spans = loadprobe.read_spans(root)
    assert len(spans) == stats.spans_written  # requests, decodes and backbones
    assert set(spans["stage"].dropna()) >= {"decode", "backbone"}
    backbone = loadprobe.read_spans(root, stage="backbone")
    assert len(backbone) == 200 and (backbone["engine"] == "gpu0").all()
    assert backbone["dur_ms"].min() == pytest.approx(2.0, rel=1e-6) and backbone["batch"].max() == 4
    assert str(backbone["ts"].dt.tz) == "UTC" and backbone["ts"].is_monotonic_increasing
    assert set(backbone["service"]) == {"frames"} and backbone.attrs["skipped"] == {}
    middle = backbone["ts_ns"].iloc[100]
    later = loadprobe.read_spans(root, stage="backbone", since=middle / 1e9)
    assert 0 < len(later) < 200 and (later["ts_ns"] >= middle - 1000).all()


def test_read_samples_and_the_portraits_tables(recording):
    root, _ = recording
    samples = loadprobe.read_samples(root, device="cpu", metric="util_pct")
    assert len(samples) >= 1 and set(samples["metric"]) == {"util_pct"} and samples["value"].between(0, 100).all()
    portrait = loadprobe.analyze([str(root)])
    tables = loadprobe.portrait_frames(portrait)
    assert set(tables) == {"stages", "traffic", "devices", "energy", "verdicts"}
    assert tables["energy"].empty  # no power sampled here: the energy test below has some
    stages = tables["stages"].set_index("stage")
    for stage in portrait.stages:
        assert stages.loc[stage.name, "count"] == stage.count
        assert stages.loc[stage.name, "p95_ms"] == stage.latency_ms.p95
    assert tables["traffic"]["requests"].sum() == portrait.requests.count
    assert len(tables["verdicts"]) == len(portrait.bottlenecks)
    assert {"host", "device", "metric", "mean", "p95", "max"} <= set(tables["devices"].columns)


def test_a_damaged_file_is_left_out_with_its_reason(recording, tmp_path):
    import shutil

    root, _ = recording
    copy = tmp_path / "data"
    shutil.copytree(root, copy)
    victim = next(copy.rglob("spans-*.parquet"))
    victim.write_bytes(b"not parquet at all")
    spans = loadprobe.read_spans(copy)
    assert str(victim) in " ".join(spans.attrs["skipped"]) or any(victim.name in k for k in spans.attrs["skipped"])


def test_pandas_stays_off_the_service_path_and_its_absence_is_one_clear_error(tmp_path):
    script = f"""
import sys, loadprobe
loadprobe.start({str(tmp_path / 'd')!r}, sample_devices=False)
with loadprobe.request():
    pass
loadprobe.stop()
assert 'pandas' not in sys.modules, 'pandas imported on the service path'
sys.modules['pandas'] = None  # as if it were not installed
try:
    loadprobe.read_spans({str(tmp_path / 'd')!r})
except loadprobe.LoadprobeError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'loadprobe[pandas]'" in out.stdout


@pytest.mark.timeout(120)
def test_the_energy_table_and_the_stages_energy_columns(tmp_path, monkeypatch):
    from ..support.energy import record

    record(tmp_path, monkeypatch, [(2.5, 0), (2.0, 150)])
    portrait = loadprobe.analyze([tmp_path / "data"])
    tables = loadprobe.portrait_frames(portrait)
    (row,) = tables["energy"].to_dict("records")
    device = portrait.energy.devices[row["device"]]
    assert row["measured_j"] == device.measured_j and row["idle_w"] == device.idle_w
    stages = tables["stages"].set_index("stage")
    backbone = portrait.stage("backbone").energy_per_item_j
    assert (stages.loc["backbone", ["energy_per_item_j_lo", "energy_per_item_j", "energy_per_item_j_hi"]].tolist()
            == [backbone.lo, backbone.mean, backbone.hi])
    assert stages["energy_per_item_j"].isna()["decode"]
