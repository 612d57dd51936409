"""The recorded data format (schema v1): Arrow schemas of span and sample files, and version rules.

Any tool that writes Parquet files with these columns, and a run.json beside them, writes
data loadprobe analyses; docs/data-format.md describes the same contract in prose.

Usage::

    import pyarrow.parquet as pq
    from loadprobe.schema import SPANS, check_version

    table = pq.read_table("data/host/svc/123-20261202T101500Z/spans-00001.parquet")
    check_version(table.schema.metadata[b"loadprobe.schema"].decode(), "spans-00001.parquet")
"""

from __future__ import annotations

import re

import pyarrow as pa

from ._version import __version__
from .formats import DATA, FormatVersionError

SCHEMA_VERSION = DATA.version
"""major.minor of the data format (``loadprobe.formats.DATA``). Readers refuse a newer major; a newer
minor only adds columns."""

LOAD_CLIENT_SERVICE = "loadprobe-load"
"""The service name of ``loadprobe load --record``'s runs: one root span per request, under the
x-request-id it sent. Analysis joins them to the server's spans of the same requests by that id, or by
the trace id it sent with it (``trace_id_of``)."""

_CLIENT_REQUEST_ID = re.compile(r"([0-9a-f]{8})-([0-9]{1,19})")


def trace_id_of(request_id: str) -> str | None:
    """The W3C trace id ``loadprobe load`` sends (``traceparent``) with its request id ``"<run>-<n>"``: the
    run's 8 hex digits, then ``n`` in 24, so a server that traces with OpenTelemetry -- and names its
    request by its trace, as vLLM does -- pairs with the client by either id. None for other ids.

    ``trace_id_of("1a2b3c4d-17")`` -> ``"1a2b3c4d000000000000000000000011"``
    """
    match = _CLIENT_REQUEST_ID.fullmatch(request_id)
    if match is None or not 0 < int(match[2]) < 2**63:
        return None
    return client_trace_id(match[1], int(match[2]))


def client_trace_id(run_id: str, n: int) -> str:
    """The trace id of ``loadprobe load``'s request ``n`` in run ``run_id`` (8 hex digits)."""
    return f"{run_id}{n:024x}"

FIRST_TOKEN = "(first token)"
"""A marker span under an LLM request: from the request's start to its first output token, so that its
end is the time to first token. Markers time a request's output; they are no stage of work, and analysis
reads them into the portrait's ``llm`` section, never into its stages (docs/data-format.md)."""

TOKEN = "(token)"
"""A marker span under an LLM request for each later piece of output (a streamed chunk, a decode step):
from the previous output to this one, so that its duration is an inter-token latency; ``tokens_out`` the
tokens it carried, where known. The request span itself carries the request's ``tokens_in`` and ``tokens_out``."""

LAST_TOKEN = "(last token)"
"""A marker span under an LLM request from its first output token to its last, for sources that time the
decode as a whole (an OpenTelemetry GenAI span) rather than token by token."""

MARKERS = (FIRST_TOKEN, TOKEN, LAST_TOKEN)

SCHEMA_KEY = b"loadprobe.schema"
VERSION_KEY = b"loadprobe.version"

STATUSES = ("ok", "error", "timeout", "cancelled")

_dict = pa.dictionary(pa.int32(), pa.string())

SPANS = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),  # span start, ns since the Unix epoch (UTC)
        pa.field("dur_ns", pa.int64()),  # null only for imported logs that carry no latency
        pa.field("stage", _dict, nullable=False),
        pa.field("span_id", pa.int64(), nullable=False),  # unique within the run directory
        pa.field("parent_id", pa.int64()),
        pa.field("request_id", pa.string()),
        pa.field("batch", pa.int64()),
        pa.field("shape", _dict),
        pa.field("engine", _dict),
        pa.field("status", _dict, nullable=False),
        pa.field("queue_ns", pa.int64()),
        pa.field("flops", pa.float64()),
        pa.field("bytes", pa.float64()),
        pa.field("tokens_in", pa.int64()),  # LLM prompt tokens, where known (imported traces)
        pa.field("tokens_out", pa.int64()),  # LLM generated tokens, where known
        # 1.1: the CPU time of the span's thread while it ran (children included), in sampled requests only
        pa.field("cpu_ns", pa.int64()),
    ],
    metadata={SCHEMA_KEY: DATA.tag("spans").encode(), VERSION_KEY: __version__.encode()},
)

SAMPLES = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("device", _dict, nullable=False),  # cpu, memory, process, disk, net, gpu0, ...
        pa.field("metric", _dict, nullable=False),  # util_pct, power_w, mem_used_bytes, ...
        pa.field("value", pa.float64(), nullable=False),
    ],
    metadata={SCHEMA_KEY: DATA.tag("samples").encode(), VERSION_KEY: __version__.encode()},
)

SCHEMAS = {"spans": SPANS, "samples": SAMPLES}


# -- what a span's ``engine`` names ----------------------------------------------------------------------

_INDEXED = re.compile(r"(cuda|gpu|npu)[:_-]?([0-9]+)")


def engine_kind(engine: str) -> str:
    """The kind of device a span's ``engine`` names: ``gpu0``, ``gpu``, ``cuda:1`` -> ``"gpu"``;
    ``npu0`` -> ``"npu"``; anything else (``cpu``, ``host``, ``onnx``) runs on the host: ``"cpu"``."""
    e = str(engine).strip().lower()
    if e.startswith("cuda"):
        return "gpu"
    return next((kind for kind in ("gpu", "npu") if e.startswith(kind)), "cpu")


def engine_device(engine: str, sampled=()) -> str:
    """The sampled device (a ``device`` of the samples) that work on ``engine`` ran on; ``sampled``
    are the devices sampled on that host. The one rule for energy, utilisation and the planner:

    - a CPU-kind engine ran on the host CPU: ``"cpu"``;
    - an indexed name is that device: ``gpu1``, ``GPU1``, ``gpu:1``, ``cuda:1`` -> ``gpu1``,
      ``npu_0`` -> ``npu0``; if it was not sampled but exactly one device of its kind was (a process
      that sees one GPU as ``cuda:0`` on a host sampled as ``gpu3``), that one;
    - a name without an index (``gpu``, ``cuda``, ``gpu-a100``) is the only sampled device of its
      kind, else index 0.

    ``engine_device("cuda", {"cpu", "gpu2"})`` -> ``"gpu2"``; ``engine_device("gpu1", {"gpu0", "gpu1"})`` -> ``"gpu1"``.
    """
    kind = engine_kind(engine)
    if kind == "cpu":
        return "cpu"
    indexed = _INDEXED.fullmatch(str(engine).strip().lower())
    named = f"{kind}{int(indexed.group(2))}" if indexed else None
    if named is not None and named in sampled:
        return named
    of_kind = sorted(d for d in sampled if engine_kind(d) == kind and _INDEXED.fullmatch(d))
    if len(of_kind) == 1:
        return of_kind[0]
    return named or f"{kind}0"


SchemaVersionError = FormatVersionError
"""Data this loadprobe cannot read for its version tag: written by a newer one, or not a tag at all."""


def check_version(tag: str, where: str) -> str:
    """Check a ``"kind/major.minor"`` tag (or a bare version) against this reader; return the kind.

    Raises SchemaVersionError naming ``where`` when the major version is newer than ours, or
    when the tag is not a version (``loadprobe.formats.DATA.check``).
    """
    DATA.check(tag, where)
    return tag.rpartition("/")[0]


def parquet_options(schema: pa.Schema) -> dict:
    """Keyword arguments for ``pq.ParquetWriter`` that every loadprobe writer uses (recorder,
    importer, benchmarks), chosen so that files are cheap to analyse, not only small.

    Usage::

        pq.ParquetWriter(path, SPANS, **parquet_options(SPANS))

    - strings (stage, engine, device, ...) keep Parquet's dictionary encoding: few distinct values;
    - integers (timestamps, ids, durations, batch sizes) are DELTA_BINARY_PACKED: start times and
      span ids rise, so their deltas pack into a few bits, and the decoder is a fast bit-unpack
      instead of a dictionary attempt that overflows and falls back to plain pages;
    - LZ4 compression, about 3x cheaper to decompress than zstd for ~15% more bytes, on the
      strings and floats; none on the delta-packed integers, whose bit-packed deltas LZ4 cannot
      shrink (1.00-1.09x on the benchmark's files): skipping it saves ~7% of the decoding CPU
      for 0.2% more bytes.

    On the benchmark's 1M-span files the 12 columns the portrait needs decode in about half the
    CPU time of zstd with default encodings (docs/benchmarks.md). Readers accept any encoding.
    Write span tables through ``write_row_groups``, which also groups each row group's rows by stage.
    """
    dictionary, delta, compression = [], {}, {}
    for field in schema:
        compression[field.name] = "lz4"
        if pa.types.is_dictionary(field.type) or pa.types.is_string(field.type):
            if field.name != "request_id":  # nearly one value per request: a dictionary only overflows
                dictionary.append(field.name)
        elif pa.types.is_integer(field.type):
            delta[field.name] = "DELTA_BINARY_PACKED"
            compression[field.name] = "none"
    return {"compression": compression, "use_dictionary": dictionary, "column_encoding": delta}


ROW_GROUP_ROWS = 128 * 1024


def write_row_groups(writer, table: pa.Table, rows: int = ROW_GROUP_ROWS) -> None:
    """Write ``table`` to a ``pq.ParquetWriter`` in row groups of ``rows``, each group's rows
    clustered by stage when the table has a ``stage`` column (a stable sort: within a stage
    rows keep their order).

    Why: root spans carry no engine, shape, batch or queue time, and only some stages carry
    FLOPs; interleaved, those nulls make every definition-level run one row long, and Arrow
    decodes such columns 2-3x slower. Clustered, the nulls form a few long runs: the columns the
    portrait reads decode in ~40% less CPU, for ~70 ns per span when writing. Row order inside
    a file carries no meaning in the data format (docs/data-format.md), so readers see no change.
    """
    for start in range(0, table.num_rows, rows):
        group = table.slice(start, rows)
        if "stage" in group.column_names:
            group = _clustered_by_stage(group)
        writer.write_table(_compact_dictionaries(group), row_group_size=rows)


def _compact_dictionaries(group: pa.Table) -> pa.Table:
    """``group`` with each dictionary column's dictionary cut to the values its rows use.

    Parquet writes an Arrow dictionary as it is, into every row group: a row group cut from
    batches with wider dictionaries (a slice of a flush, a generator's fixed vocabulary) would
    carry every value of them, and each reader would decode them all, row group by row group.
    """
    import numpy as np

    for i, field in enumerate(group.schema):
        column = group.column(i)
        if not pa.types.is_dictionary(field.type) or column.num_chunks != 1:
            continue
        array = column.chunk(0)
        indices, dictionary = array.indices, array.dictionary
        if len(dictionary) <= 1 or not len(array):
            continue
        dtype = np.dtype(f"i{indices.type.bit_width // 8}")
        codes = np.frombuffer(indices.buffers()[1], dtype=dtype, count=len(indices) + indices.offset)
        valid = np.ones(len(codes), dtype=bool)
        if indices.null_count:
            bits = np.frombuffer(indices.buffers()[0], dtype=np.uint8)
            valid = np.unpackbits(bits, count=len(codes), bitorder="little").view(bool)
        valid[:indices.offset] = False
        used = np.bincount(codes[valid], minlength=len(dictionary)) > 0
        if used.all():
            continue
        remap = (np.cumsum(used) - 1).astype(dtype)
        compact = np.where(valid, remap[np.where(valid, codes, 0)], 0).astype(dtype)
        new_indices = pa.Array.from_buffers(indices.type, len(indices), [indices.buffers()[0], pa.py_buffer(compact)],
                                            null_count=indices.null_count, offset=indices.offset)
        kept = np.flatnonzero(used).astype(np.int64)
        taken = dictionary.take(pa.Array.from_buffers(pa.int64(), len(kept), [None, pa.py_buffer(kept)]))
        group = group.set_column(i, field, pa.DictionaryArray.from_arrays(new_indices, taken))
    return group


def _clustered_by_stage(group: pa.Table) -> pa.Table:
    import numpy as np

    group = group.combine_chunks()  # one chunk: one dictionary for the stage codes
    stage = group.column("stage")
    if stage.num_chunks != 1 or not pa.types.is_dictionary(stage.type):
        return group
    indices = stage.chunk(0).indices  # stage is never null; read its buffer: Arrow's to_numpy
    dtype = np.dtype(f"i{indices.type.bit_width // 8}")  # imports pandas when installed
    codes = np.frombuffer(indices.buffers()[1], dtype=dtype, count=len(indices), offset=indices.offset * dtype.itemsize)
    if len(codes) < 2 or (codes[1:] >= codes[:-1]).all():
        return group  # one stage, or already grouped
    order = np.argsort(codes, kind="stable").astype(np.int64, copy=False)
    # from_buffers, not pa.array(), for the same reason: this runs in the recording service
    # (tests/test_packaging.py checks that it never loads pandas)
    return group.take(pa.Array.from_buffers(pa.int64(), len(order), [None, pa.py_buffer(order)]))
