"""Read recorded data files (Parquet, or an unfinished Arrow stream) into Arrow tables.

Every reader of loadprobe data goes through here, so each sees the same thing: the data
format's columns in its types (other integer and float widths cast exactly, text checked to
be UTF-8), the file's major version checked, and a file that cannot be used -- truncated,
not Parquet, a newer major version, a missing column or one of the wrong type -- set aside
with a short reason instead of an exception deep inside a reader.

Usage::

    from loadprobe.analysis.reading import span_files

    skipped = {}
    for span_file in span_files(["data/"], skipped=skipped):   # one file at a time
        print(span_file.run.run_id, span_file.path, span_file.table.num_rows)
    print(len(skipped), "file(s) skipped")                     # path -> reason

``read_data_file(ref)`` reads one file that ``dataset.file_refs`` lists (the map step uses it).
"""

from __future__ import annotations

import warnings
from typing import Iterator, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from .dataset import FileRef, Run, discover, file_refs, open_input
from .footers import all_null, request_ids_known
from ..record.segments import iter_stream
from ..schema import SCHEMA_KEY, SCHEMAS, SchemaVersionError, check_version

SPAN_COLUMNS = ["ts_ns", "dur_ns", "stage", "span_id", "parent_id", "request_id", "batch", "shape",
                "engine", "status", "queue_ns", "flops", "bytes", "tokens_in", "tokens_out", "cpu_ns"]
REQUIRED_SPAN_COLUMNS = {"ts_ns", "dur_ns", "stage", "span_id", "parent_id", "request_id", "status"}
SAMPLE_COLUMNS = ["ts_ns", "device", "metric", "value"]


class DataFile(NamedTuple):
    """A data file's table, and what its footer says of request ids when they were not read."""

    table: pa.Table
    request_ids_known: bool | None  # None: ``request_id`` was read; True/False: every span / none has one


class SpanFile(NamedTuple):
    """One data file of a run, read: what ``read_spans`` (and ``read_files``) yields."""

    run: Run
    path: str
    table: pa.Table  # the data format's columns in its types; optional ones that hold no value may be absent


class UnreadableFile(Exception):
    """A data file that cannot be used; ``reason`` says why in a few words (skipped-file lists show it)."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def span_files(paths, *, service: str | None = None, host: str | None = None,
               skipped: dict | None = None) -> Iterator[SpanFile]:
    """Every readable spans file under ``paths`` (directories, files, globs or URIs, as
    ``loadprobe analyze`` takes them), run by run, one file at a time.

    ``service`` and ``host`` are fnmatch patterns on the runs. A file that cannot be used is
    left out as ``loadprobe analyze`` leaves it out, and its reason goes into ``skipped``
    (path -> reason), with the files that are not loadprobe data at all. Raises LoadprobeError
    (as iteration starts) when ``paths`` hold no loadprobe data.
    """
    return read_files(paths, "spans", service=service, host=host, skipped=skipped)


def read_spans(paths, **options) -> Iterator[SpanFile]:
    """Deprecated name of ``span_files`` (``loadprobe.read_spans`` is the DataFrame reader)."""
    warnings.warn("loadprobe.analysis.reading.read_spans is now span_files (loadprobe.read_spans gives a DataFrame)",
                  DeprecationWarning, stacklevel=2)
    return span_files(paths, **options)


def read_files(paths, kind: str, *, service: str | None = None, host: str | None = None,
               skipped: dict | None = None) -> Iterator[SpanFile]:
    """``read_spans`` for either kind of data file: ``"spans"`` or ``"samples"``."""
    runs, not_data = discover(paths, service=service, host=host)
    if skipped is not None:
        skipped.update(not_data)
    for run in runs:
        for ref in file_refs([run]):
            if ref.kind != kind:
                continue
            try:
                table = read_data_file(ref).table
            except UnreadableFile as exc:
                if skipped is not None:
                    skipped[ref.path] = exc.reason
                continue
            yield SpanFile(run, ref.path, table)


def read_data_file(ref: FileRef, *, request_ids: bool = True, use_threads: bool = False) -> DataFile:
    """The file's table with every column analysis uses; UnreadableFile if it cannot be used.

    ``request_ids=False``: when the footer tells whether every span has a request id (or none
    has), ``request_id`` is not decoded and ``request_ids_known`` says which. ``use_threads``:
    let Arrow decode columns in parallel (when one process reads alone).
    """
    try:
        return _read(ref, request_ids, use_threads)
    except SchemaVersionError as exc:
        raise UnreadableFile(ref.path, str(exc).split(": ", 1)[-1]) from None
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise UnreadableFile(ref.path, _reason(exc)) from None


def read_request_ids(ref: FileRef) -> pa.ChunkedArray:
    """Only the ``request_id`` column of a spans file (as strings); UnreadableFile if it cannot be read."""
    try:
        source = open_input(ref)
        try:
            if ref.stream:
                column = _stream_table(source, "spans").column("request_id")
            else:
                pf = pq.ParquetFile(source, pre_buffer=False, memory_map=isinstance(source, str))
                column = pf.read(columns=["request_id"]).column("request_id")
        finally:
            if hasattr(source, "close"):
                source.close()
        return column.cast(pa.string())
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise UnreadableFile(ref.path, _reason(exc)) from None


def _stream_table(source, kind: str) -> pa.Table:
    """A segment stream's complete batches as one table, in the schema it was written with (an older minor
    version lacks the newer columns)."""
    batches = list(iter_stream(source))
    return pa.Table.from_batches(batches) if batches else SCHEMAS[kind].empty_table()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    if "magic bytes" in text or "Parquet file size is 0" in text or "footer" in text.lower():
        return "truncated or not a Parquet file"
    return text[:200]


def _read(ref: FileRef, request_ids: bool, use_threads: bool) -> DataFile:
    wanted = SPAN_COLUMNS if ref.kind == "spans" else SAMPLE_COLUMNS
    source = open_input(ref)
    known = None
    try:
        if ref.stream:
            table = _stream_table(source, ref.kind)
            # Arrow's IPC reader trusts what it reads; the Parquet reader checks dictionary
            # indices itself. The compiled kernel indexes its tables by them: check them here.
            table.validate(full=True)
        else:
            # Local files are memory-mapped: pages come straight from the page cache, no copies.
            pf = pq.ParquetFile(source, pre_buffer=False, memory_map=isinstance(source, str))
            schema, meta = pf.schema_arrow, pf.metadata  # each access builds a new object: once
            if SCHEMA_KEY in (schema.metadata or {}):
                check_version(schema.metadata[SCHEMA_KEY].decode(), ref.path)
            names = set(schema.names)
            # Required columns are read even when all null, so that the checks below see them.
            present = [c for c in wanted
                       if c in names and (c in REQUIRED_SPAN_COLUMNS or not all_null(meta, schema, c))]
            known = request_ids_known(meta, schema) if ref.kind == "spans" and not request_ids else None
            if known is not None:  # the footer says every span has (or none has) a request id
                present.remove("request_id")
            table = pf.read(columns=present, use_threads=use_threads)
    finally:
        if hasattr(source, "close"):
            source.close()
    required = REQUIRED_SPAN_COLUMNS if ref.kind == "spans" else set(SAMPLE_COLUMNS)
    missing = sorted(required - set(table.column_names) - ({"request_id"} if known is not None else set()))
    if missing:
        raise ValueError(f"missing column(s) {', '.join(missing)}; not a loadprobe {ref.kind} file")
    return DataFile(_conformed(table, SCHEMAS[ref.kind]), known)


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with its numeric columns in the data format's types; ValueError naming the first
    column that cannot be (text where a number belongs, fractions or values out of range).

    Other integer and float widths are cast exactly; text columns may be plain or dictionary
    strings (UTF-8), or integers (``columns.dictionary_codes`` names them by their text).
    Checked once here, as a file is read, so that the map step only ever sees the types it expects.
    """
    for i, name in enumerate(table.column_names):
        expected, actual = schema.field(name).type, table.schema.field(i).type
        _check_utf8(table.column(i), name)
        if actual == expected:
            continue
        numeric = pa.types.is_integer(expected) or pa.types.is_floating(expected)
        if not numeric:
            if not (pa.types.is_dictionary(actual) or pa.types.is_string(actual) or pa.types.is_large_string(actual)
                    or pa.types.is_integer(actual)):
                raise ValueError(f"column {name!r} holds {actual}, expected strings")
            continue
        if not (pa.types.is_integer(actual) or pa.types.is_floating(actual) or pa.types.is_null(actual)):
            raise ValueError(f"column {name!r} holds {actual}, expected {expected}")
        try:
            table = table.set_column(i, name, table.column(i).cast(expected))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ValueError(f"column {name!r} holds {actual} values that are not {expected} "
                             "(fractions, NaN or out of range)") from None
    return table


def _check_utf8(column: pa.ChunkedArray, name: str) -> None:
    """ValueError unless a text column's strings (a dictionary column's dictionaries) are UTF-8:
    readers decode them later, far from the file. About 4 ms per million request ids."""
    for chunk in column.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            try:
                values.validate(full=True)
            except pa.ArrowInvalid:
                raise ValueError(f"column {name!r} holds text that is not UTF-8") from None
