"""``loadprobe.analysis.reading``: the one reader of recorded files, and the readers built on it.

``span_files`` yields a recording's span files run by run and sets aside the files that cannot
be used, with the reasons ``loadprobe analyze`` gives; load replay (``loadprobe.load.arrivals``)
and the simulator's recorded service times read through it, so a damaged file costs them its
spans, not the run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import loadprobe
import loadprobe.load
from loadprobe._errors import LoadprobeError
from loadprobe.analysis.dataset import discover, file_refs
from loadprobe.analysis.reading import UnreadableFile, read_data_file, read_spans, span_files
from loadprobe.simulator.recorded import read_self_times

from ..support.synthetic_spans import generate as generate_spans

SPANS = 16_000  # 4 runs on 2 hosts, 1,000 requests of 4 spans each


@pytest.fixture
def recording(tmp_path) -> Path:
    generate_spans(tmp_path, SPANS, seed=2, jobs=1, quiet=True)
    return tmp_path


def test_every_span_file_is_read_run_by_run(recording):
    runs, _ = discover([recording])
    files = list(span_files([recording]))
    assert [f.path for f in files] == [path for run in runs for path in run.span_files]
    assert [f.run.run_id for f in files] == [run.run_id for run in runs for _ in run.span_files]
    assert sum(f.table.num_rows for f in files) == SPANS
    table = files[0].table
    assert table.schema.field("request_id").type == pa.string() and table.column("request_id").null_count == 0
    assert table.column("ts_ns").type == pa.int64()
    only = list(span_files([recording], host="infer-02"))
    assert only and {f.run.host for f in only} == {"infer-02"}
    assert sum(f.table.num_rows for f in only) == SPANS // 2


def _damage(recording: Path) -> tuple[str, str, int]:
    """A truncated file in one run and a file whose dur_ns is text in another: (their paths, spans left)."""
    runs, _ = discover([recording])
    truncated = Path(runs[0].span_files[0])
    lost = pq.read_metadata(truncated).num_rows
    truncated.write_bytes(truncated.read_bytes()[:1000])
    good = pq.read_table(runs[1].span_files[0])
    index = good.schema.get_field_index("dur_ns")
    mistyped = Path(runs[1].run_dir) / "spans-00099.parquet"
    pq.write_table(good.set_column(index, "dur_ns", pc.cast(good.column("dur_ns"), pa.string())), mistyped)
    return str(truncated), str(mistyped), SPANS - lost


def test_files_that_cannot_be_used_are_skipped_with_analyzes_reasons(recording):
    truncated, mistyped, left = _damage(recording)
    (recording / "notes.txt").write_text("not data", encoding="utf-8")
    skipped: dict = {}
    files = list(span_files([recording], skipped=skipped))
    assert sum(f.table.num_rows for f in files) == left
    assert truncated not in {f.path for f in files} and mistyped not in {f.path for f in files}
    assert skipped[truncated] == "truncated or not a Parquet file"
    assert "'dur_ns'" in skipped[mistyped] and "expected int64" in skipped[mistyped]
    assert skipped[str(recording / "notes.txt")] == "not loadprobe data"
    quality = loadprobe.analyze([recording]).data_quality
    assert {s["path"]: s["reason"] for s in quality.files_skipped} == skipped
    (ref,) = [r for r in file_refs(discover([recording])[0]) if r.path == truncated]
    with pytest.raises(UnreadableFile) as raised:
        read_data_file(ref)
    assert raised.value.path == truncated and raised.value.reason == skipped[truncated]


def test_replay_and_the_simulator_read_the_spans_that_can_be_read(recording):
    _truncated, _mistyped, left = _damage(recording)
    arrivals = loadprobe.load.arrivals(recording)  # a request's root span is its arrival
    assert len(arrivals) == left // 4 and (arrivals[1:] >= arrivals[:-1]).all()
    recorded = read_self_times(recording)  # every preprocess and nms span succeeds: one of each per request
    assert len(recorded.times["preprocess", "cpu", 1]) == len(recorded.times["nms", "gpu0", 1]) == left // 4
    assert 0.99 * left // 4 < len(recorded.outside) <= left // 4  # the requests that succeeded


def test_readers_that_find_no_readable_spans_say_which_files_they_passed_over(recording, tmp_path):
    """A folder whose span files are all unreadable (cut short, empty) gives no service times, arrivals or
    observations: each reader says so naming a file and why, rather than a vague 'no spans' -- and simulate
    --service-times no longer goes on with the plan's own times while saying they were recorded."""
    import subprocess
    import sys

    from ..conftest import REPO

    files = sorted(recording.rglob("spans-*.parquet"))
    for path in files:
        path.write_bytes(b"")
    named = re.compile(r"passed over: .*spans-\d+\.parquet: ")
    with pytest.raises(LoadprobeError, match=named):
        read_self_times(recording)
    with pytest.raises(LoadprobeError, match=named):
        loadprobe.load.arrivals(recording)
    plan = REPO / "samples" / "vision" / "pipeline.yaml"
    for args in (["simulate", plan, "--rate", "5", "--service-times", recording, "-o", tmp_path / "sim"],
                 ["verify", plan, recording, "-o", tmp_path / "verify.json"]):
        done = subprocess.run([sys.executable, "-m", "loadprobe", *map(str, args)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and named.search(done.stderr), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_no_loadprobe_data_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not data", encoding="utf-8")
    with pytest.raises(LoadprobeError, match="no loadprobe data found"):
        list(span_files([tmp_path]))


def test_the_old_name_of_the_span_file_reader_still_reads_and_says_the_new_one(recording):
    with pytest.warns(DeprecationWarning, match="now span_files"):
        files = list(read_spans([recording]))
    assert [f.path for f in files] == [f.path for f in span_files([recording])]
