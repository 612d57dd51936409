"""Import request logs teams already have (CSV or JSONL) as loadprobe runs, to analyse like recorded data.

Each data row of the log becomes one root span (stage ``request`` unless a stage column
says otherwise) in ``<output>/<host>/<service>/<run>/spans-00001.parquet``, with the schema
``loadprobe.schema.SPANS``. ``run.json`` (role ``imported``) is written last, so a run
directory that has one is complete; a failed import takes back what it wrote. The input
file is only read. docs/importing.md describes the options and the timestamp rules.

Usage::

    from loadprobe.record.importer import import_log

    result = import_log("AzureLLMInferenceTrace_code.csv", "data/", preset="azure-llm-2023")
    print(result.rows, result.rows_skipped, result.run_dir)

    import_log("requests.csv", "data/", ts_col="start", latency_col="latency_ms", stage_col="route")
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain, islice
from operator import itemgetter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._errors import LoadprobeError
from .._files import PendingFile
from . import rundir
from .segments import parquet_name
from .timestamps import DEFAULT_ORIGIN, UNITS, Clock, numbers, parse_origin
from ..schema import SPANS, STATUSES, parquet_options, write_row_groups


PRESETS = {
    # github.com/Azure/AzurePublicDataset, AzureLLMInferenceTrace_{code,conv}.csv
    "azure-llm-2023": {"ts": "TIMESTAMP", "tokens_in": "ContextTokens", "tokens_out": "GeneratedTokens"},
    # github.com/kvcache-ai/Mooncake, FAST25 traces: ms offsets from the trace's start; hash_ids unused
    "mooncake": {"ts": "timestamp", "ts_unit": "ms", "tokens_in": "input_length", "tokens_out": "output_length"},
}
"""Column mappings of public traces; explicit options override them."""


ROWS_PER_FILE = 1_000_000
"""Rows per Parquet file; a bigger log is written as spans-00001.parquet, spans-00002.parquet..."""

BATCH_ROWS = 65_536
"""Rows read and converted at a time: bounds memory whatever the log's size."""

# The CLI option naming each column, for messages; also the order fields are listed in run.json.
_OPTIONS = {"ts": "--ts-col", "latency": "--latency-col", "stage": "--stage-col", "batch": "--batch-col",
            "tokens_in": "--tokens-in-col", "tokens_out": "--tokens-out-col", "request_id": "--id-col",
            "status": "--status-col"}
_TS_NAMES = ("timestamp", "ts", "time")  # used without --ts-col when exactly one column is so named
_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}
MAX_COUNT = 2**53
"""The largest batch size or token count imported: counts are parsed as float64, exact up to 2^53."""
_END_NS = 2.0**63  # spans end before this, in int64 epoch nanoseconds (2262-04-11)


@dataclass(frozen=True)
class ImportResult:
    """What one import wrote. ``skipped`` maps each reason to the number of rows left out for it."""

    run_dir: Path
    rows: int
    skipped: dict[str, int] = field(default_factory=dict)
    first_ns: int | None = None
    last_ns: int | None = None

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())


def import_log(
    path: str | os.PathLike,
    output_dir: str | os.PathLike = "loadprobe-data",
    *,
    preset: str | None = None,
    ts_col: str | None = None,
    latency_col: str | None = None,
    stage_col: str | None = None,
    batch_col: str | None = None,
    tokens_in_col: str | None = None,
    tokens_out_col: str | None = None,
    request_id_col: str | None = None,
    status_col: str | None = None,
    ts_unit: str | None = None,
    latency_unit: str | None = None,
    ts_format: str | None = None,
    origin: str | datetime | None = None,
    service: str | None = None,
    host: str | None = None,
) -> ImportResult:
    """Write the CSV/TSV/JSONL log at ``path`` (optionally ``.gz``) as a new run under ``output_dir``.

    ``preset`` ("azure-llm-2023", "mooncake") fills in the column mapping; explicit options
    override it. Without ``ts_col``, the one column named timestamp, ts or time is used.
    ``ts_unit``/``latency_unit`` are "s", "ms", "us" or "ns"; ``ts_format`` is a
    ``datetime.strptime`` format; ``origin`` (ISO-8601) anchors relative timestamps
    (default 2024-01-01T00:00:00Z). ``service`` defaults to the file's stem, ``host`` to
    "imported". Raises LoadprobeError, naming the file, on bad input.
    """
    source = Path(path)
    where = str(source)
    if preset is not None and preset not in PRESETS:
        raise LoadprobeError(f"{where}: unknown preset {preset!r}; use one of {', '.join(sorted(PRESETS))}")
    settings = dict(PRESETS.get(preset, {}))
    explicit = {"ts": ts_col, "latency": latency_col, "stage": stage_col, "batch": batch_col,
                "tokens_in": tokens_in_col, "tokens_out": tokens_out_col, "request_id": request_id_col,
                "status": status_col, "ts_unit": ts_unit}
    settings.update({key: value for key, value in explicit.items() if value is not None})
    for option, unit in (("--ts-unit", settings.get("ts_unit")), ("--latency-unit", latency_unit)):
        if unit is not None and unit not in UNITS:
            raise LoadprobeError(f"{where}: {option} {unit!r} is not a unit; use s, ms, us or ns")
    origin_ns = parse_origin(DEFAULT_ORIGIN if origin is None else origin)
    if not source.is_file():
        raise LoadprobeError(f"{where}: {'not a file' if source.exists() else 'no such file'}; "
                             "give the path of a CSV or JSONL log")
    fmt = _format_of(source)
    stem = file_stem(source)
    host = rundir.safe_name(host or "imported")
    service = rundir.safe_name(service or stem)
    run_id = rundir.imported_run_id(stem, time.time_ns())

    try:
        handle = _open_text(source)
    except OSError as exc:
        raise LoadprobeError(f"{where}: cannot open it ({exc.strerror or exc}); check its permissions") from None
    with handle:
        names, records = _read_records(handle, fmt, where)
        columns = {name: settings[name] for name in _OPTIONS if settings.get(name)}
        if "ts" not in columns:
            columns["ts"] = _guess_ts_column(names, where)
        pick = _picker(fmt, names, columns, where)
        clock = Clock(where, columns["ts"], settings.get("ts_unit"), ts_format, origin_ns)
        latency_ns = _latency_factor(columns.get("latency"), latency_unit, where)

        files = SpanFiles(rundir.run_path(output_dir, host, service, run_id))
        skipped: dict[str, int] = {}
        try:
            for start, lines, values in _batches(records, pick, list(columns)):
                table, left_out = _spans(values, lines, start, run_id, clock, latency_ns, columns, where)
                for reason, count in left_out.items():
                    skipped[reason] = skipped.get(reason, 0) + count
                files.write(table)
            files.close()
            if files.run_dir is None:
                why = f" ({_describe(skipped)})" if skipped else ""
                raise LoadprobeError(f"{where}: no rows to import{why}; check the file and the column options")
            source_info = {
                "path": str(source.resolve()),
                "sha256": file_sha256(source),
                "format": fmt,
                "preset": preset,
                "columns": columns,
                "timestamps": clock.describe(),
                "latency_unit": next((u for u, f in UNITS.items() if f == latency_ns), None),
                "rows": files.rows + sum(skipped.values()),
                "rows_skipped": skipped,
            }
            put_new(lambda: rundir.write_run_json(files.run_dir, imported_run_info(host, service, files, source_info),
                                                   overwrite=False), files.run_dir / rundir.RUN_JSON)
        except BaseException as exc:
            files.discard()
            if isinstance(exc, OSError):  # reading errors were turned into LoadprobeError: this is the output
                raise LoadprobeError(f"{where}: cannot write the run under {output_dir} ({exc}); "
                                     "check that directory or choose another with -o") from None
            raise
    return ImportResult(files.run_dir, files.rows, skipped, files.first_ns, files.last_ns)


def imported_run_info(host: str, service: str, files: SpanFiles, source: dict) -> dict:
    """run.json of an imported run: the recorder's fields, no process or machine, and where the data came from."""
    return rundir.run_document(
        host=host, service=service, run_id=files.run_dir.name, role="imported",
        started_ns=files.first_ns, stopped_ns=files.last_ns,
        counters={"spans_recorded": files.rows, "spans_dropped": 0, "spans_written": files.rows,
                  "samples_written": 0, "samples_dropped": 0, "files": len(files.done),
                  "write_errors": 0, "extractor_errors": 0, "invalid_values": 0},
        source=source,
    )


# -- reading -------------------------------------------------------------------------------


def _format_of(source: Path) -> str:
    suffixes = [s.lower() for s in source.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes.pop()
    fmt = _FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        raise LoadprobeError(f"{source}: unknown format {''.join(source.suffixes) or '(no extension)'!r}; "
                             "expected .csv, .tsv, .jsonl, .ndjson or .json (one object per line), optionally .gz")
    return fmt


def file_stem(source: Path) -> str:
    """``trace.csv.gz`` -> ``trace``."""
    name = source.name[:-3] if source.name.lower().endswith(".gz") else source.name
    return Path(name).stem


def _open_text(source: Path):
    # utf-8-sig: a byte-order mark written by some tools must not become part of the first column's name.
    if source.name.lower().endswith(".gz"):
        return gzip.open(source, "rt", encoding="utf-8-sig", newline="")
    return open(source, encoding="utf-8-sig", newline="")


def _read_records(handle, fmt: str, where: str):
    """(column names, iterator of (line number, record)); a record is a list (CSV) or a dict (JSONL).

    JSONL column names are the fields of the first object.
    """
    if fmt in ("csv", "tsv"):
        # strict: a quote left open would otherwise swallow every row after it without a word
        reader = csv.reader(_guarded(handle, where), delimiter="\t" if fmt == "tsv" else ",", strict=True)
        rows = _csv_records(reader, where)
        header = next(rows, (0, None))[1]
        if not header:
            raise LoadprobeError(f"{where}: empty; expected a header row naming the columns")
        return [name.strip() for name in header], _widened(rows, len(header))
    records = _json_records(handle, where)
    first = next(records, None)
    if first is None:
        raise LoadprobeError(f"{where}: empty; expected one JSON object per line")
    return list(first[1]), chain([first], records)


def _csv_records(reader, where: str):
    """(line number, row) of each CSV record, the header first; a LoadprobeError at the line a bad one starts."""
    start = reader.line_num + 1  # where the record being read begins: a quoted field may span lines
    try:
        for row in reader:
            yield reader.line_num, row
            start = reader.line_num + 1
    except csv.Error as exc:
        why = "a quote opened there is never closed" if "end of data" in str(exc) else exc
        raise LoadprobeError(f"{where}, line {start}: cannot read it as CSV ({why}); "
                             "check the quoting on that line") from None


def _widened(records, width: int):
    """The data rows, each ``width`` fields long: a short row's missing fields are empty; blank lines are left out."""
    for line, row in records:
        if len(row) < width:
            if not row:
                continue  # a blank line is no request
            row += [None] * (width - len(row))
        yield line, row


def _json_records(handle, where: str):
    for number, line in enumerate(_guarded(handle, where), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise LoadprobeError(f"{where}, line {number}: not valid JSON ({exc}); "
                                 "expected one JSON object per line") from None
        if not isinstance(record, dict):
            raise LoadprobeError(f"{where}, line {number}: a JSON {type(record).__name__}, expected one object "
                                 "per line; convert a JSON array to JSON lines first (e.g. jq -c '.[]')")
        yield number, record


def _guarded(lines, where: str):
    """``lines``, with read and decode failures turned into a LoadprobeError naming the file."""
    try:
        yield from lines
    except (UnicodeDecodeError, OSError, EOFError, zlib.error) as exc:
        raise LoadprobeError(f"{where}: cannot read it ({exc}); expected UTF-8 text (gzip-compressed "
                             "if it ends in .gz)") from None


def _guess_ts_column(names: list[str], where: str) -> str:
    found = [name for name in names if name.lower() in _TS_NAMES]
    if len(found) == 1:
        return found[0]
    raise LoadprobeError(f"{where}: which column holds the request's start time? give --ts-col "
                         f"(columns: {', '.join(names)})")


def _picker(fmt: str, names: list[str], columns: dict[str, str], where: str):
    """A function taking a record to the tuple of its values in ``columns``, in their order."""
    for name, column in columns.items():
        if column not in names:
            kind = "columns" if fmt in ("csv", "tsv") else "fields of its first line"
            raise LoadprobeError(f"{where}: no column {column!r} (from {_OPTIONS[name]} or the preset); "
                                 f"its {kind}: {', '.join(names)}")
    if fmt in ("csv", "tsv"):
        # itemgetter is the fastest way to pick; a trailing extra index keeps its result a tuple.
        return itemgetter(*(names.index(column) for column in columns.values()), 0)
    keys = list(columns.values())
    return lambda record: tuple(map(record.get, keys))


def _batches(records, pick, fields: list[str]):
    """Yield (index of the first row, line numbers, {field: raw values}) for each BATCH_ROWS rows."""
    start = 0
    while batch := [(line, *pick(record)) for line, record in islice(records, BATCH_ROWS)]:
        lines, *values = zip(*batch)
        yield start, list(lines), dict(zip(fields, values))
        start += len(batch)


# -- converting ----------------------------------------------------------------------------


def _spans(values: dict, lines: list[int], start: int, run_id: str, clock: Clock, latency_ns: int | None,
           columns: dict, where: str) -> tuple[pa.Table, dict[str, int]]:
    """One batch of raw values as a SPANS table, and the number of rows skipped for each reason."""
    n = len(lines)
    text = {name: _text(raw) for name, raw in values.items()}
    ts = clock.to_ns(text["ts"], lines)
    keep = ts.is_valid().to_numpy(zero_copy_only=False)
    skipped = {"no timestamp": int(n - keep.sum())}

    duration = pa.nulls(n, pa.int64())
    if "latency" in text:
        latency = numbers(text["latency"], lines, where, columns["latency"], "a number (a duration)")
        with np.errstate(over="ignore"):  # an overflow is inf: out of range below
            ns = latency.to_numpy(zero_copy_only=False) * latency_ns  # null -> NaN
        negative = ns < 0
        skipped["negative latency"] = int((negative & keep).sum())
        # A span must end where int64 nanoseconds still count (2262): a longer latency is a broken value.
        starts = ts.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        too_long = ns >= _END_NS - starts
        skipped["latency out of range"] = int((too_long & keep & ~negative).sum())
        keep &= ~negative & ~too_long
        ns = np.where(keep, ns, np.nan)
        duration = pa.array(np.round(np.nan_to_num(ns)).astype(np.int64), mask=np.isnan(ns))

    span_ids = np.arange(start + 1, start + n + 1, dtype=np.int64)  # the row's number among the data rows
    generated = pc.binary_join_element_wise(f"{run_id}-", pa.array(span_ids).cast(pa.string()), "")
    request_ids = pc.coalesce(text["request_id"], generated) if "request_id" in text else generated
    stage = text["stage"].fill_null("request") if "stage" in text else pa.array(["request"] * n)
    counts = {name: _counts(text[name], lines, where, columns[name]) if name in text else pa.nulls(n, pa.int64())
              for name in ("batch", "tokens_in", "tokens_out")}
    no_text = pa.nulls(n, pa.string()).dictionary_encode()
    arrays = [
        ts, duration, stage.dictionary_encode(), pa.array(span_ids), pa.nulls(n, pa.int64()),
        request_ids, counts["batch"], no_text, no_text,
        _statuses(text.get("status"), n), pa.nulls(n, pa.int64()), pa.nulls(n, pa.float64()),
        pa.nulls(n, pa.float64()), counts["tokens_in"], counts["tokens_out"], pa.nulls(n, pa.int64()),
    ]
    mask = pa.array(keep)
    table = pa.Table.from_arrays([array.filter(mask) for array in arrays], schema=SPANS)
    return table, {reason: count for reason, count in skipped.items() if count}


def _text(raw: list) -> pa.Array:
    """CSV strings or JSON values as stripped strings; empty ones become null."""
    try:
        text = pa.array(raw, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # JSON numbers, booleans, lists
        text = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in raw], pa.string())
    text = pc.utf8_trim_whitespace(text)
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _counts(text: pa.Array, lines: list[int], where: str, column: str) -> pa.Array:
    """Batch sizes and token counts: whole numbers from 0 to MAX_COUNT."""
    expected = f"a whole number from 0 to {MAX_COUNT:,}"
    values = numbers(text, lines, where, column, expected)
    floats = values.to_numpy(zero_copy_only=False)
    bad = ~np.isnan(floats) & ((floats < 0) | (floats > MAX_COUNT) | (floats != np.floor(floats)))
    if bad.any():
        at = int(np.argmax(bad))
        raise LoadprobeError(f"{where}, line {lines[at]}: column {column!r} = {text[at].as_py()!r}, "
                             f"expected {expected}")
    return values.cast(pa.int64())


def _statuses(text: pa.Array | None, n: int) -> pa.DictionaryArray:
    if text is None:
        return pa.array(["ok"] * n).dictionary_encode()
    distinct = text.fill_null("").dictionary_encode()  # map each distinct value once, not each row
    mapped = pa.array([_status(value) for value in distinct.dictionary.to_pylist()], pa.string())
    return mapped.take(distinct.indices).dictionary_encode()


def _status(value: str) -> str:
    """An HTTP code or free text as ok / error / timeout / cancelled."""
    text = value.lower()
    if text in STATUSES:
        return text
    if text.isdigit():
        code = int(text)
        return "timeout" if code in (408, 504) else "cancelled" if code == 499 else "error" if code >= 500 else "ok"
    if "timeout" in text or "timed out" in text:
        return "timeout"
    if "cancel" in text:
        return "cancelled"
    if "error" in text or "fail" in text or "exception" in text:
        return "error"
    return "ok"


def _latency_factor(column: str | None, unit: str | None, where: str) -> int | None:
    """Nanoseconds per unit of the latency column: ``unit``, else its name's suffix (_s, _ms, _us, _ns)."""
    if column is None:
        return None
    if unit is None:
        unit = next((u for u in UNITS if column.lower().endswith("_" + u)), None)
    if unit is None:
        raise LoadprobeError(f"{where}: in what unit is the latency column {column!r}? "
                             "give --latency-unit s, ms, us or ns")
    return UNITS[unit]


class SpanFiles:
    """The run's ``spans-00001.parquet``, ``-00002``...: up to ROWS_PER_FILE rows each.

    The run directory is made with the first rows, so input found bad before then leaves no
    trace; each file is written under a hidden temporary name and renamed once complete.
    """

    def __init__(self, path: Path) -> None:
        self.path = path  # the run directory's name, taken (or -2, -3...) with the first rows
        self.run_dir: Path | None = None
        self.done: list[Path] = []
        self.rows = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self._writer: pq.ParquetWriter | None = None
        self._file: PendingFile | None = None  # the file being written, under its temporary name
        self._rows_in_file = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if self.run_dir is None:
            self.run_dir = rundir.create(self.path)
        bounds = pc.min_max(table.column("ts_ns")).as_py()
        self.first_ns = bounds["min"] if self.first_ns is None else min(self.first_ns, bounds["min"])
        self.last_ns = bounds["max"] if self.last_ns is None else max(self.last_ns, bounds["max"])
        self.rows += table.num_rows
        while table.num_rows:
            if self._writer is None:
                target = self.run_dir / parquet_name("spans", len(self.done) + 1)
                self._file = PendingFile(target, durable=True, overwrite=False)  # imported data: kept through a crash
                self._writer = pq.ParquetWriter(self._file.path, SPANS, **parquet_options(SPANS))
                self._rows_in_file = 0
            part = table.slice(0, ROWS_PER_FILE - self._rows_in_file)
            table = table.slice(part.num_rows)
            write_row_groups(self._writer, part)
            self._rows_in_file += part.num_rows
            if self._rows_in_file >= ROWS_PER_FILE:
                self.close()

    def close(self) -> None:
        """Finish the file being written, if any."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
            self.done.append(put_new(self._file.commit, self._file.target))
            self._file = None

    def discard(self) -> None:
        """After a failed import, remove what it wrote so no half run is left behind."""
        if self.run_dir is None:
            return
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except (OSError, pa.ArrowException):
                pass
        if self._file is not None:
            self._file.discard()
        for path in self.done:
            path.unlink(missing_ok=True)
        try:
            self.run_dir.rmdir()
        except OSError:
            pass  # something else is in it: not ours to delete



def put_new(write, target: Path) -> Path:
    """Run ``write`` (which refuses to replace ``target``); the run directory is new, so a file
    already there was put by someone else: never replace it."""
    try:
        return write()
    except FileExistsError:
        raise LoadprobeError(f"{target}: appeared while importing; import again (a new run directory is used)") \
            from None


def file_sha256(source: Path) -> str:
    digest = hashlib.sha256()
    with open(source, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _describe(skipped: dict[str, int]) -> str:
    return ", ".join(f"{count:,} with {reason}" for reason, count in skipped.items()) + " skipped"
