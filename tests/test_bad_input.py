"""Bad input, generated: every command given a damaged file exits 0 or 2, says what is wrong naming
the file, never prints a traceback or an internal error, and leaves its input byte for byte as it was.

Hypothesis damages valid files the project writes itself -- a small recording (its spans Parquet
file, an unfinished Arrow stream, run.json), its portrait.json, plans.json and pipeline.yaml, and
request logs made from its spans -- by truncating, flipping and inserting bytes, and by putting
wrong types, missing and extra fields, huge numbers, NaN, negatives and odd unicode into them.
The inputs it found failing are kept in tests/corpus/bad_input/<kind>/ and replayed as plain tests.

CI runs a fixed, small set of examples (derandomized, about half a minute). To look further:
``LOADPROBE_FUZZ_EXAMPLES=500`` draws that many fresh examples per kind, and
``LOADPROBE_FUZZ_SAVE=DIR`` writes each failing input into DIR/<kind>/, ready for the corpus.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import math
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadprobe
from loadprobe.record.segments import iter_stream
from loadprobe.cli import main

from .conftest import record_and_crash

CORPUS = Path(__file__).parent / "corpus" / "bad_input"
EXPLORE = int(os.environ.get("LOADPROBE_FUZZ_EXAMPLES", "0"))
SAVE = os.environ.get("LOADPROBE_FUZZ_SAVE")


def fuzz(examples: int):
    """Settings of one harness: ``examples`` fixed ones in CI, LOADPROBE_FUZZ_EXAMPLES fresh ones when exploring."""
    return settings(max_examples=EXPLORE or examples, derandomize=not EXPLORE, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- the valid files everything starts from ------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """Valid inputs of every kind, as bytes, made by the project from a small real recording."""
    root = tmp_path_factory.mktemp("base")
    loadprobe.start(root / "data", service="svc", sample_devices=False, flush_interval_s=0.05)
    for i in range(40):
        with loadprobe.request():
            start = time.perf_counter_ns()
            loadprobe.record_span("decode", start, start + 1_000_000 + i * 1000, engine="cpu")
            loadprobe.record_span("backbone", start + 1_000_000, start + 3_000_000 + i * 1000, engine="gpu0",
                                  batch=1 + i % 4, shape=(1 + i % 3, 3), flops=1e9, bytes=1e7)
    loadprobe.stop()
    run = next((root / "data").glob("*/*/*"))
    record_and_crash(root / "crashed", 30)
    files = {"spans.parquet": next(run.glob("spans-*.parquet")), "run.json": run / "run.json",
             "spans.arrows": next((root / "crashed").rglob(".spans-*.arrows"))}
    runner = CliRunner()
    assert runner.invoke(main, ["analyze", str(root / "data"), "-o", str(root / "report"), "--no-html"]).exit_code == 0
    plan = root / "plan" / "pipeline.yaml"
    assert runner.invoke(main, ["recommend", str(root / "report" / "portrait.json"), "-o", str(plan)]).exit_code == 0
    files.update({"portrait.json": root / "report" / "portrait.json", "plans.json": plan.with_name("plans.json"),
                  "pipeline.yaml": plan})
    out = {kind: path.read_bytes() for kind, path in files.items()}
    spans = pq.read_table(files["spans.parquet"]).to_pylist()
    rows = [{"time": f"{s['ts_ns'] / 1e9:.6f}", "latency_ms": s["dur_ns"] / 1e6, "route": s["stage"],
             "batch": s["batch"], "tokens_in": 7, "status": 200 if s["status"] == "ok" else 500} for s in spans]
    text = io.StringIO()
    writer = csv.DictWriter(text, list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    out["log.csv"] = text.getvalue().encode()
    out["log.jsonl"] = "".join(json.dumps(row) + "\n" for row in rows).encode()
    out.update(_otlp_files())
    return out


def _otlp_files() -> dict:
    """OTLP files as the OpenTelemetry Collector writes them, of spans made by the real SDK."""
    from opentelemetry import trace as api
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "host.name": "h"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bad-input")
    for i in range(8):
        with tracer.start_as_current_span("POST /x", kind=api.SpanKind.SERVER):
            with tracer.start_as_current_span("llm_request", attributes={
                    "loadprobe.batch": 1 + i % 3, "gen_ai.usage.prompt_tokens": 9,
                    "gen_ai.latency.time_to_first_token": 0.01, "gen_ai.latency.time_in_model_decode": 0.002}):
                pass
    spans = list(exporter.get_finished_spans())
    messages = [spans[k:k + 6] for k in range(0, len(spans), 6)]
    proto = b"".join(len(m).to_bytes(4, "big") + m for m in (encode_proto(part).SerializeToString()
                                                           for part in messages))
    return {"otlp.jsonl": "".join(encode_json(part).to_json() + "\n" for part in messages).encode(),
            "otlp.pb": proto}


# -- damage --------------------------------------------------------------------------------

HOSTILE = [None, True, 0, -1, 2**63, -(2**63) - 1, 10**400, 1e308, -1e308, math.nan, math.inf, 5e-324, "", "fast",
           "é\u202e😀\x00", "9" * 300, [], [1, 2, 3], {}, {"x": {"y": [None]}}]
HOSTILE_TEXT = ["", "-1", "0", "NaN", "inf", "1e13", "1e400", "-1e400", "99999999999999999999999", "0x10", "1_000",
                '"', 'a"b', "é\u202e😀", "\x00", "9999-12-31T23:59:59Z", "0001-01-01", "2262-04-12", " ", "true"]


@st.composite
def damaged_bytes(draw, data: bytes) -> bytes:
    """``data`` truncated, with bytes flipped, or with bytes inserted or dropped."""
    how = draw(st.sampled_from(["truncate", "flip", "insert", "drop"]))
    at = draw(st.integers(0, max(0, len(data) - 1)))
    if how == "truncate":
        return data[:at]
    if how == "flip":
        flips = draw(st.lists(st.tuples(st.integers(0, max(0, len(data) - 1)), st.integers(1, 255)), min_size=1,
                              max_size=8))
        out = bytearray(data)
        for position, mask in flips:
            if out:
                out[position] ^= mask
        return bytes(out)
    if how == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=64)) + data[at:]
    return data[:at] + data[at + draw(st.integers(1, 64)):]


def _paths(value, prefix=()) -> list:
    """Every place in a JSON document: the key or index path to each value."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value[:20]):  # long series: their first values are enough
            out += _paths(item, prefix + (i,))
    return out


@st.composite
def damaged_document(draw, document):
    """``document`` (a JSON value) with one to three values replaced, removed, or given an extra field."""
    document = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(document)))
        how = draw(st.sampled_from(["replace", "replace", "remove", "extra"]))
        new = copy.deepcopy(draw(st.sampled_from(HOSTILE)))  # never the shared value: it may be changed next
        if not path:
            document = new if how == "replace" else document
            continue
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if how == "replace":
            parent[path[-1]] = new
        elif how == "remove":
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]]["zz_extra"] = new
        elif isinstance(parent[path[-1]], list):
            parent[path[-1]].append(new)
    return document


def _column_like(column: pa.ChunkedArray, values: list) -> pa.Array:
    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    for attempt in (kind, None):
        try:
            return pa.array(values, attempt)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            pass
    return pa.array([None if v is None else str(v) for v in values])


def _hostile_column(name: str, n: int):
    return {"text": pa.array([f"{i}ms" for i in range(n)]), "nan": pa.array([math.nan] * n),
            "fraction": pa.array([0.5] * n), "uint64": pa.array([2**64 - 1] * n, pa.uint64()),
            "max": pa.array([2**63 - 1] * n), "min": pa.array([-(2**63)] * n), "negative": pa.array([-1] * n),
            "zero": pa.array([0] * n), "null": pa.nulls(n), "int_nulls": pa.nulls(n, pa.int64()),
            "list": pa.array([[1]] * n), "bool": pa.array([True] * n), "unicode": pa.array(["é\u202e😀\x00"] * n),
            "timestamp": pa.array([0] * n, pa.timestamp("ns")), "struct": pa.array([{"a": 1}] * n)}[name]


@st.composite
def damaged_table(draw, table: pa.Table) -> pa.Table:
    """``table`` with columns replaced by hostile ones, values set to extremes, columns dropped or added,
    its schema tag changed, or rows removed."""
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["column", "value", "value", "drop", "extra", "tag", "rows"]))
        name = draw(st.sampled_from(table.column_names)) if table.num_columns else None
        if how == "column" and name:
            kind = draw(st.sampled_from(["text", "nan", "fraction", "uint64", "max", "min", "negative", "zero", "null",
                                         "int_nulls", "list", "bool", "unicode", "timestamp", "struct"]))
            table = table.set_column(table.column_names.index(name), name, _hostile_column(kind, table.num_rows))
        elif how == "value" and name and table.num_rows:
            values = table.column(name).to_pylist()
            row = draw(st.integers(0, table.num_rows - 1))
            values[row] = draw(st.sampled_from([None, 0, -1, 2**63 - 1, -(2**63), 2**62, math.nan, "", "é😀",
                                                values[draw(st.integers(0, table.num_rows - 1))]]))
            column = _column_like(table.column(name), values)
            table = table.set_column(table.column_names.index(name), name, column)
        elif how == "drop" and name:
            table = table.drop_columns([name])
        elif how == "extra":
            table = table.append_column("zz_extra", pa.array([1] * table.num_rows))
        elif how == "tag":
            tag = draw(st.sampled_from([b"spans/2.0", b"spans/1.9", b"spans/x", b"", b"samples/1.0", b"spans/99999999999999999999"]))
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"loadprobe.schema": tag})
        elif how == "rows":
            table = table.slice(0, draw(st.integers(0, table.num_rows)))
    return table


@st.composite
def spans_file(draw, data: bytes, stream: bool) -> bytes:
    table = pa.Table.from_batches(list(iter_stream(pa.BufferReader(data)))) if stream else \
        pq.read_table(pa.BufferReader(data))
    if draw(st.booleans()):
        table = draw(damaged_table(table))
    sink = pa.BufferOutputStream()
    if stream:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=10)
    else:
        pq.write_table(table, sink, row_group_size=draw(st.sampled_from([7, 1000])))
    out = sink.getvalue().to_pybytes()
    return draw(damaged_bytes(out)) if draw(st.integers(0, 2)) == 0 else out


@st.composite
def log_file(draw, data: bytes, jsonl: bool) -> bytes:
    lines = data.decode().splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["cell", "cell", "cell", "drop", "copy", "raw"]))
        i = draw(st.integers(0, len(lines) - 1)) if lines else 0
        if how == "cell" and lines:
            if jsonl:
                record = json.loads(lines[i]) if lines[i].strip().startswith("{") else {}
                record = draw(damaged_document(record))
                lines[i] = json.dumps(record) + "\n"
            else:
                cells = next(csv.reader([lines[i]]), [])
                if cells:
                    cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(HOSTILE_TEXT))
                    lines[i] = ",".join(cells) + "\n"
        elif how == "drop" and lines:
            del lines[i]
        elif how == "copy" and lines:
            lines.insert(i, lines[i])
        elif how == "raw":
            lines.insert(i, draw(st.sampled_from(['"open,quote\n', "[1, 2]\n", "{}\n", "\n", ",,,,,,,\n",
                                                   "\ufeffts\n", "a" * 5000 + "\n"])))
    out = "".join(lines).encode("utf-8", "surrogatepass")
    return draw(damaged_bytes(out)) if draw(st.integers(0, 3)) == 0 else out


@st.composite
def json_file(draw, data: bytes) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(damaged_bytes(data))
    return json.dumps(draw(damaged_document(json.loads(data))), allow_nan=True).encode()


@st.composite
def yaml_file(draw, data: bytes) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(damaged_bytes(data))
    document = draw(damaged_document(yaml.safe_load(data)))
    return yaml.safe_dump(document, allow_unicode=True, sort_keys=False).encode()


# -- running the commands ------------------------------------------------------------------

KINDS = {  # kind -> (file name the command is given, how to damage its base)
    "spans-parquet": ("spans-00001.parquet", lambda base: spans_file(base["spans.parquet"], stream=False)),
    "spans-arrows": (".spans-00001.arrows", lambda base: spans_file(base["spans.arrows"], stream=True)),
    "run-json": ("run.json", lambda base: json_file(base["run.json"])),
    "log-csv": ("log.csv", lambda base: log_file(base["log.csv"], jsonl=False)),
    "log-jsonl": ("log.jsonl", lambda base: log_file(base["log.jsonl"], jsonl=True)),
    "otlp-json": ("otlp.jsonl", lambda base: log_file(base["otlp.jsonl"], jsonl=True)),
    "otlp-proto": ("otlp.pb", lambda base: damaged_bytes(base["otlp.pb"])),
    "portrait": ("portrait.json", lambda base: json_file(base["portrait.json"])),
    "plans": ("plans.json", lambda base: json_file(base["plans.json"])),
    "pipeline": ("pipeline.yaml", lambda base: yaml_file(base["pipeline.yaml"])),
}
_IMPORT = ["--latency-col", "latency_ms", "--stage-col", "route", "--batch-col", "batch", "--tokens-in-col",
           "tokens_in", "--status-col", "status", "--ts-unit", "s"]


def _digest(root: Path) -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def _commands(kind: str, given: Path, inputs: Path, out: Path, base: dict) -> list[list[str]]:
    """What to run on ``given``, laying out the valid files it needs beside it under ``inputs``."""
    def valid(name: str, kind_: str) -> Path:
        path = inputs / "valid" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base[kind_])
        return path

    if kind.startswith("spans") or kind == "run-json":
        run = given.parent
        if kind == "run-json":
            (run / "spans-00001.parquet").write_bytes(base["spans.parquet"])
        else:
            (run / "run.json").write_bytes(base["run.json"])
        return [["analyze", str(inputs / "data"), "-o", str(out / "report")]]
    if kind.startswith("log"):
        return [["import", str(given), "-o", str(out / "data"), *_IMPORT]]
    if kind.startswith("otlp"):
        return [["import", str(given), "-o", str(out / "data")]]
    if kind == "portrait":
        return [["recommend", str(given), "-o", str(out / "plan" / "pipeline.yaml")],
                ["report", str(given), "--no-plan", "-o", str(out / "r.html")]]
    portrait = valid("portrait.json", "portrait.json")
    if kind == "plans":
        return [["simulate", str(given), "--rate", "20", "--duration", "1", "--seed", "1", "-o", str(out / "sim"),
                 "--no-html"],
                ["report", str(portrait), "--plans", str(given), "-o", str(out / "r.html")]]
    plans = valid("plans.json", "plans.json")
    return [["validate", str(given)],
            ["export", str(given), "--to", "triton", "-o", str(out / "triton")],
            ["export", str(given), "--to", "ray-serve", "-o", str(out / "ray-serve")],
            ["simulate", str(given), "--rate", "20", "--duration", "1", "--seed", "1", "-o", str(out / "sim"),
             "--no-html"],
            ["report", str(portrait), "--plans", str(plans), "--pipeline", str(given), "-o", str(out / "r.html")]]


def _check(result, args: list[str], given: Path) -> None:
    output = result.output
    assert result.exit_code in (0, 2), (args, output)
    assert "Traceback" not in output and "internal error" not in output, (args, output)
    if result.exit_code == 2:
        assert given.name in output or str(given.parent) in output, (args, output)


def run_case(kind: str, data: bytes, base: dict) -> None:
    """Every command for ``kind`` on ``data``: exit 0 or 2, a message naming the file, the input unchanged."""
    with tempfile.TemporaryDirectory(prefix="loadprobe-bad-") as scratch:
        inputs, out = Path(scratch) / "in", Path(scratch) / "out"
        name = KINDS[kind][0]
        given = inputs / "data" / "h" / "s" / "1" / name if kind.startswith("spans") or kind == "run-json" \
            else inputs / name
        given.parent.mkdir(parents=True)
        given.write_bytes(data)
        runner = CliRunner()
        try:
            for args in _commands(kind, given, inputs, out, base):
                before = _digest(inputs)
                result = runner.invoke(main, args)
                _check(result, args, given)
                assert _digest(inputs) == before, args
                if args[0] == "import" and kind.startswith("otlp") and result.exit_code == 0:
                    # what import wrote from a damaged trace, analyze reads cleanly
                    again = runner.invoke(main, ["analyze", str(out / "data"), "-o", str(out / "report"), "--no-html"])
                    assert again.exit_code in (0, 2), again.output
                    assert "Traceback" not in again.output and "internal error" not in again.output, again.output
                if args[0] == "analyze" and result.exit_code == 0:
                    # what analyze wrote from damaged data, recommend reads: the two agree on portrait.json
                    again = runner.invoke(main, ["recommend", str(out / "report" / "portrait.json"), "-o",
                                                 str(out / "plan" / "pipeline.yaml")])
                    assert again.exit_code in (0, 2) and "not a portrait loadprobe wrote" not in again.output, \
                        again.output
                    assert "Traceback" not in again.output and "internal error" not in again.output, again.output
        except AssertionError:
            if SAVE:
                target = Path(SAVE) / kind / f"{hashlib.sha256(data).hexdigest()[:12]}{Path(name).suffix}"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            raise


# -- the harnesses -------------------------------------------------------------------------


def _harness(kind: str, examples: int):
    @fuzz(examples)
    @given(data=st.data())
    def test(base, data):
        run_case(kind, data.draw(KINDS[kind][1](base), label=kind), base)

    test.__name__ = f"test_damaged_{kind.replace('-', '_')}_is_refused_cleanly"
    return test


test_damaged_spans_parquet_is_refused_cleanly = _harness("spans-parquet", 25)
test_damaged_spans_arrows_is_refused_cleanly = _harness("spans-arrows", 15)
test_damaged_run_json_is_refused_cleanly = _harness("run-json", 10)
test_damaged_log_csv_is_refused_cleanly = _harness("log-csv", 30)
test_damaged_log_jsonl_is_refused_cleanly = _harness("log-jsonl", 20)
test_damaged_otlp_json_is_refused_cleanly = _harness("otlp-json", 20)
test_damaged_otlp_proto_is_refused_cleanly = _harness("otlp-proto", 20)
test_damaged_portrait_is_refused_cleanly = _harness("portrait", 30)
test_damaged_plans_is_refused_cleanly = _harness("plans", 25)
test_damaged_pipeline_is_refused_cleanly = _harness("pipeline", 20)


@pytest.mark.parametrize("case", sorted(CORPUS.glob("*/*")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_case_is_refused_cleanly(base, case):
    run_case(case.parent.name, case.read_bytes(), base)


def test_the_corpus_holds_small_cases_of_known_kinds():
    cases = sorted(CORPUS.glob("*/*"))
    assert cases and {c.parent.name for c in cases} <= set(KINDS)
    assert all(c.stat().st_size <= 65_536 for c in cases), [c for c in cases if c.stat().st_size > 65_536]
