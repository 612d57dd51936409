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

import pyarrow as pa

from ._version import __version__

SCHEMA_VERSION = "1.0"
"""major.minor of the data format. Readers refuse a newer major; a newer minor only adds columns."""

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
    ],
    metadata={SCHEMA_KEY: f"spans/{SCHEMA_VERSION}".encode(), VERSION_KEY: __version__.encode()},
)

SAMPLES = pa.schema(
    [
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("device", _dict, nullable=False),  # cpu, memory, process, disk, net, gpu0, ...
        pa.field("metric", _dict, nullable=False),  # util_pct, power_w, mem_used_bytes, ...
        pa.field("value", pa.float64(), nullable=False),
    ],
    metadata={SCHEMA_KEY: f"samples/{SCHEMA_VERSION}".encode(), VERSION_KEY: __version__.encode()},
)

SCHEMAS = {"spans": SPANS, "samples": SAMPLES}


class SchemaVersionError(ValueError):
    """Data written by a newer loadprobe than this one can read."""


def check_version(tag: str, where: str) -> str:
    """Check a ``"kind/major.minor"`` tag (or a bare version) against this reader; return the kind.

    Raises SchemaVersionError naming ``where`` when the major version is newer than ours.
    """
    kind, _, version = tag.rpartition("/")
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise SchemaVersionError(f"{where}: unreadable schema version {tag!r}; expected like 'spans/1.0'") from None
    ours = int(SCHEMA_VERSION.split(".")[0])
    if major > ours:
        raise SchemaVersionError(
            f"{where}: written with data format {version}, newer than this loadprobe reads "
            f"({SCHEMA_VERSION}); upgrade loadprobe (pip install -U loadprobe)"
        )
    return kind
