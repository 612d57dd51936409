"""The run directory's one owner (loadprobe/record/rundir.py), shared by the recorder and the importer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import loadprobe
from loadprobe import probe
from loadprobe.cli.record import recover_finished_runs
from loadprobe.record import rundir
from loadprobe.record.importer import import_log

from ..conftest import record_and_crash


def test_names_and_the_layout():
    assert rundir.safe_name("my svc/../x") == "my_svc_.._x" and rundir.safe_name("..") == "service"
    assert rundir.utc_stamp(1_796_367_018_532_999_999) == "20261204T065018.532Z"
    assert rundir.recorded_run_id(4217, 1_796_367_018_532_000_000) == "4217-20261204T065018.532Z"
    assert rundir.imported_run_id("trace v2", 1_796_367_018_532_000_000) == "import-trace_v2-20261204T065018.532Z"
    assert rundir.run_path("data", "h", "s", "r") == Path("data/h/s/r")
    assert set(rundir.host_name()) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def test_a_long_service_name_still_records(tmp_path):
    """A name past the file system's 255 bytes lost every span before (ENAMETOOLONG, retried forever)."""
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    assert len(rundir.safe_name("é" * 200).encode()) <= rundir.MAX_NAME_BYTES
    assert rundir.safe_name(long_a) != rundir.safe_name(long_b)
    loadprobe.start(tmp_path, service=long_a, sample_devices=False)
    with probe("step"):
        pass
    loadprobe.stop()
    assert len(list(tmp_path.rglob("spans-*.parquet"))) == 1


def test_a_taken_run_directory_is_never_reused(tmp_path):
    made = [rundir.create(tmp_path / "h" / "s" / "r") for _ in range(3)]
    assert [p.name for p in made] == ["r", "r-2", "r-3"] and all(p.is_dir() for p in made)


def test_recorded_and_imported_run_json_have_the_same_fields(tmp_path):
    @probe("step")
    def step():
        pass

    loadprobe.start(tmp_path / "rec", sample_devices=False)
    step()
    stats = loadprobe.stop()
    recorded = json.loads((Path(stats.run_dir) / "run.json").read_text())
    log = tmp_path / "r.csv"
    log.write_text("ts,latency_ms\n2026-01-01 00:00:00,3\n")
    imported_dir = import_log(log, tmp_path / "imp", latency_col="latency_ms").run_dir
    imported = json.loads((imported_dir / "run.json").read_text())
    assert list(imported) == [*recorded, "source"]
    assert recorded["schema"] == imported["schema"] == "run/1.0"
    assert recorded["role"] == "service" and imported["role"] == "imported"


def test_run_json_has_room_to_be_rewritten_in_place(tmp_path):
    info = {"schema": "run/1.0", "counters": {"spans_written": 1}}
    rundir.write_run_json(tmp_path, info, room=True)
    size = (tmp_path / "run.json").stat().st_size
    assert size % 4096 == 0 and size >= len(rundir.encode(info)) + 1024
    longer = {**info, "counters": {"spans_written": 10**12, "write_errors": 1}}
    assert rundir.rewrite_in_place(tmp_path, longer)
    assert json.loads((tmp_path / "run.json").read_text()) == longer
    assert (tmp_path / "run.json").stat().st_size == size
    assert not rundir.rewrite_in_place(tmp_path, {"pad": "x" * size})  # would not fit: left as it was
    assert json.loads((tmp_path / "run.json").read_text()) == longer
    assert not rundir.rewrite_in_place(tmp_path / "missing", info)


def test_a_run_json_written_by_a_newer_loadprobe_is_not_recovered(tmp_path):
    record_and_crash(tmp_path, 5)
    (crashed,) = tmp_path.glob("*/svc/*")
    run_json = crashed / "run.json"
    info = json.loads(run_json.read_text())
    assert rundir.run_is_dead(crashed)
    run_json.write_text(json.dumps({**info, "schema": "run/2.0"}))
    assert rundir.read_run_json(crashed) is None and not rundir.run_is_dead(crashed)
    assert recover_finished_runs(tmp_path) == 0
    assert list(crashed.glob(".spans-*.arrows"))  # its stream is left as it was
    run_json.write_text(json.dumps({**info, "schema": None}))  # damaged, not newer: read as before
    assert rundir.read_run_json(crashed)["pid"] == info["pid"] and rundir.run_is_dead(crashed)
    (crashed / ".spans-00001.parquet.0badc0de.tmp").write_bytes(b"half")  # a conversion cut short
    assert recover_finished_runs(tmp_path) == 1
    assert list(crashed.glob("spans-*.parquet")) and not [n for n in os.listdir(crashed) if n.startswith(".")]
