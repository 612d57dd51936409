"""``loadprobe import``: real traces and real files in, Parquet runs out, read back with pyarrow."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from loadprobe.record import importer, rundir, timestamps
from loadprobe._errors import LoadprobeError
from loadprobe.cli import _Group
from loadprobe.cli import import_ as cli_import
from loadprobe.record.importer import import_log
from loadprobe.schema import SPANS

from ..conftest import REPO

SAMPLE_AZURE_CODE = REPO / "samples" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
SHARED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def shared_trace(relative: str) -> Path:
    path = SHARED_TRACES / relative
    if not path.is_file():
        pytest.skip(f"real trace {path} not present (the shared traces folder is not checked out)")
    return path


def ns(*args, **kwargs) -> int:
    """Epoch ns of a UTC datetime, computed exactly."""
    moment = datetime(*args, **kwargs, tzinfo=timezone.utc)
    return int(moment.replace(microsecond=0).timestamp()) * 10**9 + moment.microsecond * 1000


def read_run(run_dir: Path) -> tuple[pa.Table, dict]:
    """The spans (checking every file's schema) and run.json of one run directory."""
    tables = []
    for path in sorted(run_dir.glob("spans-*.parquet")):
        table = pq.read_table(path)
        assert table.schema.equals(SPANS, check_metadata=True), path
        tables.append(table)
    assert not list(run_dir.glob(".*")), "no temporary files are left"
    return pa.concat_tables(tables), json.loads((run_dir / "run.json").read_text())


def column_sum(path: Path, column: str) -> int:
    with open(path, newline="") as handle:
        return sum(int(row[column]) for row in csv.DictReader(handle))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- the real traces --------------------------------------------------------------------------


def test_azure_code_trace_from_samples_becomes_one_root_span_per_request(tmp_path):
    result = import_log(SAMPLE_AZURE_CODE, tmp_path / "data", preset="azure-llm-2023")
    spans, info = read_run(result.run_dir)

    assert result.rows == spans.num_rows == 8819
    assert result.rows_skipped == 0
    assert pc.sum(spans["tokens_in"]).as_py() == column_sum(SAMPLE_AZURE_CODE, "ContextTokens")
    assert pc.sum(spans["tokens_out"]).as_py() == column_sum(SAMPLE_AZURE_CODE, "GeneratedTokens")
    first = ns(2023, 11, 16, 18, 17, 3, 979960)
    assert spans["ts_ns"][0].as_py() == result.first_ns == first
    assert result.last_ns == ns(2023, 11, 16, 19, 14, 19, 928016)
    assert spans["span_id"].to_pylist() == list(range(1, 8820))
    assert spans["parent_id"].null_count == spans["dur_ns"].null_count == 8819  # roots without latency
    assert set(spans["stage"].to_pylist()) == {"request"}
    assert set(spans["status"].to_pylist()) == {"ok"}
    assert len(set(spans["request_id"].to_pylist())) == 8819

    host, service, run_id = result.run_dir.relative_to(tmp_path / "data").parts
    assert (host, service) == ("imported", "AzureLLMInferenceTrace_code")
    assert run_id.startswith("import-AzureLLMInferenceTrace_code-")
    assert info["schema"] == "run/1.0" and info["role"] == "imported"
    assert (info["host"], info["service"], info["run_id"], info["pid"]) == (host, service, run_id, None)
    assert (info["started_ns"], info["stopped_ns"]) == (result.first_ns, result.last_ns)
    assert info["counters"]["spans_written"] == 8819 and info["counters"]["files"] == 1
    assert info["counters"]["spans_dropped"] == 0
    assert info["samplers"] == {} and info["hardware"] == {}
    source = info["source"]
    assert source["sha256"] == hashlib.sha256(SAMPLE_AZURE_CODE.read_bytes()).hexdigest()
    assert source["preset"] == "azure-llm-2023"
    assert source["columns"] == {"ts": "TIMESTAMP", "tokens_in": "ContextTokens", "tokens_out": "GeneratedTokens"}
    assert (source["rows"], source["rows_skipped"]) == (8819, {})


def test_azure_conv_trace(tmp_path):
    path = shared_trace("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
    result = import_log(path, tmp_path, preset="azure-llm-2023")
    spans, _ = read_run(result.run_dir)
    assert result.rows == spans.num_rows == 19366
    assert pc.sum(spans["tokens_in"]).as_py() == column_sum(path, "ContextTokens")
    assert result.first_ns == ns(2023, 11, 16, 18, 15, 46, 680590)


def test_mooncake_trace_offsets_start_at_the_documented_origin(tmp_path):
    path = shared_trace("mooncake_fast25/conversation_trace.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    result = import_log(path, tmp_path, preset="mooncake")
    spans, info = read_run(result.run_dir)

    assert result.rows == spans.num_rows == len(records) == 12031
    origin = ns(2024, 1, 1)
    assert spans["ts_ns"].to_pylist() == [origin + r["timestamp"] * 10**6 for r in records]
    assert spans["tokens_in"].to_pylist() == [r["input_length"] for r in records]
    assert spans["tokens_out"].to_pylist() == [r["output_length"] for r in records]
    assert info["source"]["timestamps"] == {"kind": "relative", "unit": "ms", "origin": "2024-01-01T00:00:00Z"}

    moved = import_log(path, tmp_path, preset="mooncake", origin="2025-06-30T12:00:00+02:00")
    assert moved.first_ns == ns(2025, 6, 30, 10)
    assert moved.last_ns - moved.first_ns == result.last_ns - result.first_ns


# -- generic logs ---------------------------------------------------------------------------------

GENERIC = """\
time,latency_ms,route,batch,status,id
2026-03-01T10:00:00.5Z,12.5,/embed,4,200,a1
2026-03-01 10:00:01.123456789,7,/chat,1,503,a2
2026-03-01T12:00:02+02:00,0.25,,2,timeout,
"""


def test_generic_csv_with_iso_times_latency_stage_batch_status_and_ids(tmp_path):
    log = write(tmp_path / "requests.csv", GENERIC)
    result = import_log(log, tmp_path / "data", latency_col="latency_ms", stage_col="route", batch_col="batch",
                        status_col="status", request_id_col="id")
    spans, info = read_run(result.run_dir)
    rows = spans.to_pylist()

    assert [r["ts_ns"] for r in rows] == [ns(2026, 3, 1, 10, 0, 0, 500000), ns(2026, 3, 1, 10, 0, 1) + 123456789,
                                          ns(2026, 3, 1, 10, 0, 2)]
    assert [r["dur_ns"] for r in rows] == [12_500_000, 7_000_000, 250_000]
    assert [r["stage"] for r in rows] == ["/embed", "/chat", "request"]
    assert [r["batch"] for r in rows] == [4, 1, 2]
    assert [r["status"] for r in rows] == ["ok", "error", "timeout"]
    assert [r["request_id"] for r in rows[:2]] == ["a1", "a2"]
    assert rows[2]["request_id"] == f"{result.run_dir.name}-3"  # generated where the log has none
    assert result.run_dir.parent.name == "requests"
    assert info["source"]["columns"]["ts"] == "time"  # found by name without --ts-col
    assert info["source"]["latency_unit"] == "ms"


@pytest.mark.parametrize("unit, scale", [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)])
def test_epoch_numbers_are_read_in_the_unit_their_magnitude_says(tmp_path, unit, scale):
    start = 1_767_225_600  # 2026-01-01T00:00:00Z
    log = write(tmp_path / "epoch.csv", f"ts,ms\n{start * scale},1\n{(start + 2) * scale},2\n")
    result = import_log(log, tmp_path, latency_col="ms", latency_unit="ms")
    spans, info = read_run(result.run_dir)
    assert spans["ts_ns"].to_pylist() == [start * 10**9, (start + 2) * 10**9]
    assert info["source"]["timestamps"] == {"kind": "epoch", "unit": unit}


def test_fractional_epoch_seconds_and_an_explicit_unit(tmp_path):
    log = write(tmp_path / "frac.csv", "ts\n1767225600.25\n1767225601.5\n")
    assert read_run(import_log(log, tmp_path).run_dir)[0]["ts_ns"].to_pylist() == [
        ns(2026, 1, 1, 0, 0, 0, 250000), ns(2026, 1, 1, 0, 0, 1, 500000)]
    relative = write(tmp_path / "relative.csv", "ts\n0\n1.5\n")
    spans, _ = read_run(import_log(relative, tmp_path, ts_unit="s", origin="2026-01-01").run_dir)
    assert spans["ts_ns"].to_pylist() == [ns(2026, 1, 1), ns(2026, 1, 1, 0, 0, 1, 500000)]


def test_ts_format_reads_other_date_forms(tmp_path):
    log = write(tmp_path / "eu.csv", "when\n01/03/2026 10:00:00\n01/03/2026 10:00:05\n")
    result = import_log(log, tmp_path, ts_col="when", ts_format="%d/%m/%Y %H:%M:%S")
    assert (result.first_ns, result.last_ns) == (ns(2026, 3, 1, 10), ns(2026, 3, 1, 10, 0, 5))


def test_jsonl_with_explicit_latency_unit_and_gzip_give_the_same_spans(tmp_path):
    lines = [{"t": "2026-01-01T00:00:00Z", "lat": 0.5, "stage": "detect", "tokens": 3},
             {"t": "2026-01-01T00:00:01Z", "lat": 1, "stage": "detect", "tokens": None},
             {"t": "2026-01-01T00:00:02Z", "stage": "classify"}]
    text = "\n".join(json.dumps(line) for line in lines) + "\n\n"
    plain = write(tmp_path / "log.jsonl", text)
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    options = dict(ts_col="t", latency_col="lat", latency_unit="s", stage_col="stage", tokens_in_col="tokens")

    spans, _ = read_run(import_log(plain, tmp_path / "a", **options).run_dir)
    packed_result = import_log(packed, tmp_path / "b", **options)
    packed_spans, info = read_run(packed_result.run_dir)

    assert spans["dur_ns"].to_pylist() == [500_000_000, 1_000_000_000, None]
    assert spans["stage"].to_pylist() == ["detect", "detect", "classify"]
    assert spans["tokens_in"].to_pylist() == [3, None, None]
    assert packed_spans.drop_columns(["request_id"]).equals(spans.drop_columns(["request_id"]))
    assert packed_result.run_dir.parent.name == "log"  # the stem without .jsonl.gz
    assert info["source"]["format"] == "jsonl"


def test_tsv(tmp_path):
    log = write(tmp_path / "log.tsv", "ts\tlatency_us\n2026-01-01 00:00:00\t1500\n")
    spans, _ = read_run(import_log(log, tmp_path, latency_col="latency_us").run_dir)
    assert spans["dur_ns"].to_pylist() == [1_500_000]


def test_rows_without_timestamp_or_with_negative_latency_are_skipped_and_counted(tmp_path):
    log = write(tmp_path / "neg.csv", "ts,latency_ms,route\n2026-01-01 00:00:00,5,/a\n2026-01-01 00:00:01,-1,/a\n"
                                      ",3,/a\n2026-01-01 00:00:03,-0.5,/b\n2026-01-01 00:00:04,,/b\n\n"
                                      "2026-01-01 00:00:05,NaN,/c\n2026-01-01 00:00:06,1\n")
    result = import_log(log, tmp_path, latency_col="latency_ms", stage_col="route")
    spans, info = read_run(result.run_dir)
    assert result.rows == 4 and result.rows_skipped == 3
    assert result.skipped == {"no timestamp": 1, "negative latency": 2}
    assert spans["span_id"].to_pylist() == [1, 5, 6, 7]  # span ids still count the rows of the file
    assert spans["dur_ns"].to_pylist() == [5_000_000, None, None, 1_000_000]
    assert spans["stage"].to_pylist() == ["/a", "/b", "/c", "request"]  # a short row's missing fields are empty
    assert info["source"]["rows"] == 7 and info["source"]["rows_skipped"] == result.skipped


def test_latencies_past_int64_nanoseconds_are_skipped_and_counted(tmp_path):
    log = write(tmp_path / "huge.csv", "ts,latency_ms\n2026-01-01 00:00:00,5\n2026-01-01 00:00:01,1e13\n"
                                       "2026-01-01 00:00:02,1e400\n2026-01-01 00:00:03,7\n")
    done = loadprobe("import", str(log), "-o", str(tmp_path / "out"), "--latency-col", "latency_ms")
    assert done.exit_code == 0, done.output
    assert "2 requests, 2 skipped (latency out of range: 2)" in done.stdout
    spans, info = read_run(next((tmp_path / "out").glob("*/*/*")))
    assert spans["dur_ns"].to_pylist() == [5_000_000, 7_000_000]
    assert info["source"]["rows_skipped"] == {"latency out of range": 2}


@pytest.mark.parametrize("value", ["99999999999999999999999", "1e300", "9007199254740994"])
def test_a_batch_size_too_large_to_count_is_refused_naming_the_line(tmp_path, value):
    log = write(tmp_path / "b.csv", f"ts,batch\n2026-01-01 00:00:00,4\n2026-01-01 00:00:01,{value}\n")
    done = loadprobe("import", str(log), "-o", str(tmp_path / "out"), "--batch-col", "batch")
    assert done.exit_code == 2 and "Traceback" not in done.output
    assert done.stderr.splitlines() == [f"loadprobe: error: {log}, line 3: column 'batch' = {value!r}, expected a "
                                        "whole number from 0 to 9,007,199,254,740,992"]
    assert not (tmp_path / "out").exists()


def test_an_unterminated_quote_is_reported_at_its_line_not_swallowed(tmp_path):
    log = write(tmp_path / "q.csv", 'ts,route\n2026-01-01 00:00:00,/a\n2026-01-01 00:00:01,"/b\n'
                                    '2026-01-01 00:00:02,/c\n2026-01-01 00:00:03,/d\n')
    done = loadprobe("import", str(log), "-o", str(tmp_path / "out"), "--stage-col", "route")
    assert done.exit_code == 2
    assert done.stderr.splitlines() == [f"loadprobe: error: {log}, line 3: cannot read it as CSV (a quote opened "
                                        "there is never closed); check the quoting on that line"]


def test_a_quoted_field_over_several_lines_is_still_one_row(tmp_path):
    log = write(tmp_path / "m.csv", 'ts,route\n2026-01-01 00:00:00,"/a\nb"\n2026-01-01 00:00:01,/c\n')
    spans, _ = read_run(import_log(log, tmp_path, stage_col="route").run_dir)
    assert spans["stage"].to_pylist() == ["/a\nb", "/c"]


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59Z", "0001-01-01", "2262-04-12"])
def test_a_time_outside_int64_nanoseconds_is_refused_naming_the_line(tmp_path, value):
    log = write(tmp_path / "t.csv", f"ts\n2026-01-01 00:00:00\n{value}\n")
    with pytest.raises(LoadprobeError, match=f"t.csv, line 3: timestamp column 'ts' = '{value}' is out of range"):
        import_log(log, tmp_path / "out")


@pytest.mark.parametrize("value, status", [
    ("200", "ok"), ("404", "ok"), ("500", "error"), ("504", "timeout"), ("408", "timeout"), ("499", "cancelled"),
    ("OK", "ok"), ("success", "ok"), ("Internal Error", "error"), ("failed", "error"), ("read timed out", "timeout"),
    ("CANCELLED", "cancelled"), ("", "ok"),
])
def test_status_mapping(tmp_path, value, status):
    log = write(tmp_path / "s.csv", f"ts,status\n2026-01-01 00:00:00,{value}\n")
    spans, _ = read_run(import_log(log, tmp_path, status_col="status").run_dir)
    assert spans["status"].to_pylist() == [status]


def test_big_logs_are_split_into_numbered_files(tmp_path, monkeypatch):
    monkeypatch.setattr(importer, "ROWS_PER_FILE", 1000)
    monkeypatch.setattr(importer, "BATCH_ROWS", 300)  # batches that straddle the files
    result = import_log(SAMPLE_AZURE_CODE, tmp_path, preset="azure-llm-2023")
    spans, info = read_run(result.run_dir)
    assert sorted(p.name for p in result.run_dir.glob("spans-*")) == [f"spans-{i:05d}.parquet" for i in range(1, 10)]
    assert spans["span_id"].to_pylist() == list(range(1, 8820))
    assert info["counters"]["files"] == 9


def test_a_bad_row_after_the_first_file_leaves_no_half_run(tmp_path, monkeypatch):
    monkeypatch.setattr(importer, "ROWS_PER_FILE", 2)
    monkeypatch.setattr(importer, "BATCH_ROWS", 2)
    log = write(tmp_path / "late.csv", "ts\n2026-01-01 00:00:00\n2026-01-01 00:00:01\n2026-01-01 00:00:02\nsoon\n")
    with pytest.raises(LoadprobeError, match="line 5"):
        import_log(log, tmp_path / "data")
    assert not list((tmp_path / "data").rglob("*.*"))


# -- never overwrite, never touch the input -------------------------------------------------


def test_input_is_untouched_and_importing_twice_makes_two_runs(tmp_path):
    log = write(tmp_path / "requests.csv", GENERIC)
    before = (log.read_bytes(), log.stat().st_mtime_ns)
    first = import_log(log, tmp_path / "data", latency_col="latency_ms")
    second = import_log(log, tmp_path / "data", latency_col="latency_ms")
    assert (log.read_bytes(), log.stat().st_mtime_ns) == before
    assert first.run_dir != second.run_dir
    assert first.run_dir.parent == second.run_dir.parent
    for result in (first, second):
        assert read_run(result.run_dir)[0].num_rows == 3


def test_a_taken_run_name_gets_a_suffix(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir, "utc_stamp", lambda ns: "20260101T000000.000Z")
    log = write(tmp_path / "r.csv", "ts\n2026-01-01 00:00:00\n")
    names = [import_log(log, tmp_path).run_dir.name for _ in range(3)]
    assert names == ["import-r-20260101T000000.000Z", "import-r-20260101T000000.000Z-2",
                     "import-r-20260101T000000.000Z-3"]


# -- bad input: one line naming the file, the field, what was expected, what to do --------------------


@pytest.mark.parametrize("name, text, options, expected", [
    ("r.csv", "ts,ms\n2026-01-01,1\n", {"latency_col": "latency"},
     r"no column 'latency' \(from --latency-col or the preset\); its columns: ts, ms"),
    ("r.jsonl", '{"ts": 1767225600, "n": 1}\n', {"tokens_in_col": "tokens"}, "no column 'tokens'.*ts, n"),
    ("r.csv", "ts\n2026-01-01 00:00:00\n2026-01-01 00:00:01\n2026-13-45 00:00:00\n", {},
     r"line 4: timestamp column 'ts' = '2026-13-45 00:00:00' is not a time.*--ts-format"),
    ("r.csv", "ts\n1767225600\nyesterday\n", {}, r"line 3: column 'ts' = 'yesterday', expected a number"),
    ("r.csv", "ts\n2026-01-01 00:00:00\n", {"ts_format": "%d/%m/%Y"}, "line 2.*does not match --ts-format"),
    ("r.csv", "ts\n0\n1500\n", {}, "small numbers.*give --ts-unit"),
    ("r.csv", "ts,lat\n2026-01-01,1\n", {"latency_col": "lat"}, "unit is the latency column 'lat'.*--latency-unit"),
    ("r.csv", "ts,latency_ms\n2026-01-01,fast\n", {"latency_col": "latency_ms"},
     "line 2: column 'latency_ms' = 'fast', expected a number"),
    ("r.csv", "ts,batch\n2026-01-01,2.5\n", {"batch_col": "batch"}, "line 2: column 'batch' = '2.5', expected a whole"),
    ("r.csv", "a,b\n1,2\n", {}, "give --ts-col.*columns: a, b"),
    ("r.csv", "", {}, "empty; expected a header row"),
    ("r.csv", "ts\n", {}, "no rows to import"),
    ("r.jsonl", '{"ts": 1767225600}\n{"ts": \n', {}, "line 2: not valid JSON"),
    ("r.jsonl", "[1, 2]\n", {}, "a JSON list, expected one object per line"),
    ("r.txt", "ts\n1\n", {}, r"unknown format '.txt'; expected \.csv"),
    ("r.csv", "ts\n2026-01-01\n", {"preset": "nope"}, "unknown preset 'nope'; use one of azure-llm-2023, mooncake"),
    ("r.csv", "ts\n2026-01-01\n", {"origin": "noon"}, "--origin 'noon' is not an ISO-8601 time"),
    ("r.csv", "ts\n2026-01-01\n", {"ts_unit": "h"}, "--ts-unit 'h' is not a unit"),
])
def test_bad_input_raises_one_line_naming_the_file(tmp_path, name, text, options, expected):
    log = write(tmp_path / name, text)
    with pytest.raises(LoadprobeError, match=expected) as raised:
        import_log(log, tmp_path / "data", **options)
    message = str(raised.value)
    assert "\n" not in message
    if "--origin" not in expected:
        assert message.startswith(str(log))
    assert not (tmp_path / "data").exists()  # nothing written


def test_missing_file_and_bad_gzip(tmp_path):
    with pytest.raises(LoadprobeError, match="nope.csv: no such file"):
        import_log(tmp_path / "nope.csv", tmp_path)
    fake = write(tmp_path / "fake.csv.gz", "ts\n2026-01-01\n")
    with pytest.raises(LoadprobeError, match="fake.csv.gz: cannot read it"):
        import_log(fake, tmp_path / "data")


def test_unreadable_csv_and_unwritable_output(tmp_path):
    huge = write(tmp_path / "huge.csv", "ts,note\n2026-01-01,ok\n2026-01-01,\"" + "x" * 200_000 + "\"\n")
    with pytest.raises(LoadprobeError, match="huge.csv, line 3: cannot read it as CSV"):
        import_log(huge, tmp_path / "data")
    log = write(tmp_path / "r.csv", "ts\n2026-01-01\n")
    blocker = write(tmp_path / "taken", "a file where the output directory should be")
    with pytest.raises(LoadprobeError, match="r.csv: cannot write the run under .*taken.*choose another with -o"):
        import_log(log, blocker)


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(1980, 1, 1), max_value=datetime(2200, 1, 1)),
       st.integers(min_value=0, max_value=999), st.integers(min_value=0, max_value=9),
       st.sampled_from(["T", " "]), st.integers(min_value=-14 * 60, max_value=14 * 60))
def test_iso_times_read_the_same_with_and_without_zone_and_digits(moment, extra_ns, digits, sep, offset_min):
    exact = ns(moment.year, moment.month, moment.day, moment.hour, moment.minute, moment.second,
               moment.microsecond) + extra_ns
    fraction = f"{exact % 10**9:09d}"[:digits]
    text = moment.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + (f".{fraction}" if digits else "")
    expected = exact // 10 ** (9 - digits) * 10 ** (9 - digits)
    assert timestamps._iso_ns(text) == expected
    assert pa.array([text]).cast(pa.timestamp("ns")).cast(pa.int64())[0].as_py() == expected  # the fast path agrees
    local = moment + timedelta(minutes=offset_min)
    sign, minutes = ("+" if offset_min >= 0 else "-"), abs(offset_min)
    zoned = local.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + (f".{fraction}" if digits else "") + \
        f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    assert timestamps._iso_ns(zoned) == expected


# -- the command line ---------------------------------------------------------------------------


def loadprobe(*args: str):
    """Run ``loadprobe import`` through the real group class (one-line errors, exit 2)."""
    group = _Group("loadprobe")
    group.add_command(cli_import.import_command)
    return CliRunner().invoke(group, list(args))


def test_cli_imports_a_trace_with_a_preset_and_says_where(tmp_path):
    done = loadprobe("import", str(SAMPLE_AZURE_CODE), "-o", str(tmp_path), "--preset", "azure-llm-2023")
    assert done.exit_code == 0, done.output
    (run_json,) = (tmp_path / "imported" / "AzureLLMInferenceTrace_code").glob("*/run.json")
    assert done.stdout == (f"AzureLLMInferenceTrace_code.csv: 8,819 requests, 0 skipped, 2023-11-16 18:17:03 .. "
                           f"19:14:19 UTC (57.3 min) -> {run_json.parent}\n")


def test_cli_imports_each_file_into_a_run_of_its_own(tmp_path):
    first = write(tmp_path / "first.csv", "start\n2026-01-01 00:00:00\n2026-01-01 00:30:00\n")
    second = write(tmp_path / "second.csv", "start\n2026-01-01 23:00:00\n2026-01-02 01:00:00\n")
    done = loadprobe("import", str(first), str(second), "-o", str(tmp_path / "out"), "--ts-col", "start",
                     "--host", "lab")
    assert done.exit_code == 0, done.output
    assert [line.split(" -> ")[0] for line in done.stdout.splitlines()] == [
        "first.csv: 2 requests, 0 skipped, 2026-01-01 00:00:00 .. 00:30:00 UTC (30.0 min)",
        "second.csv: 2 requests, 0 skipped, 2026-01-01 23:00:00 .. 2026-01-02 01:00:00 UTC (120.0 min)",
    ]
    assert {p.parent.parent.name for p in (tmp_path / "out" / "lab").glob("*/*/run.json")} == {"first", "second"}


def test_cli_reports_skipped_rows(tmp_path):
    log = write(tmp_path / "neg.csv", "ts,latency_ms\n2026-01-01 00:00:00,5\n2026-01-01 00:00:01,-1\n")
    done = loadprobe("import", str(log), "-o", str(tmp_path), "--latency-col", "latency_ms", "--service", "api")
    assert done.exit_code == 0, done.output
    assert "neg.csv: 1 requests, 1 skipped (negative latency: 1), 2026-01-01 00:00:00 .. 00:00:00 UTC (0.0 s)" \
        in done.stdout
    assert list((tmp_path / "imported" / "api").glob("*/run.json"))


def test_cli_bad_input_exits_2_with_one_line_and_no_traceback(tmp_path):
    log = write(tmp_path / "r.csv", "when,x\n2026-01-01,1\n")
    done = loadprobe("import", str(log), "-o", str(tmp_path / "out"), "--ts-col", "time")
    assert done.exit_code == 2
    assert done.stderr.splitlines() == [
        f"loadprobe: error: {log}: no column 'time' (from --ts-col or the preset); its columns: when, x"]
    assert "Traceback" not in done.output
    assert not (tmp_path / "out").exists()


def test_cli_choices_match_the_importer():
    options = {p.name: p for p in cli_import.import_command.params}
    assert list(options["preset"].type.choices) == sorted(importer.PRESETS)
    assert list(options["ts_unit"].type.choices) == list(options["latency_unit"].type.choices) == list(importer.UNITS)
