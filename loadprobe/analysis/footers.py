"""What Parquet footers say about a span file's columns without reading a row.

Reading uses them to leave out work: a column whose statistics say it is all null is not
read, and ``request_id`` -- the costliest column to decode -- is not decoded when only its
presence matters (the footer's null counts answer that) or when no two hosts can share an id
(their min/max ranges do not overlap), since the cross-host clock check then finds nothing.

Usage::

    pf = pq.ParquetFile(path)
    all_null(pf.metadata, pf.schema_arrow, "batch")            # True: no row has a batch size
    request_ids_known(pf.metadata, pf.schema_arrow)            # True / False / None (mixed, unknown)
    hosts_may_share_request_ids(file_refs(runs))               # from every span file's footer
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from .dataset import open_input


def all_null(meta: pq.FileMetaData, schema: pa.Schema, column: str) -> bool:
    """Whether the footer's statistics say a column holds only nulls (so it need not be read)."""
    index = schema.get_field_index(column)
    if meta.num_row_groups == 0 or index < 0:
        return False
    try:
        for i in range(meta.num_row_groups):
            chunk = meta.row_group(i).column(index)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count or stats.null_count != chunk.num_values:
                return False
    except (IndexError, ValueError):
        return False
    return True


def request_ids_known(meta: pq.FileMetaData, schema: pa.Schema) -> bool | None:
    """True if no span lacks a request id, False if none has one, None if mixed or unknown.

    The request id strings are the costliest column to decode; when only their presence
    matters, the footer's null counts answer without reading them.
    """
    index = schema.get_field_index("request_id")
    if index < 0:
        return None
    nulls = total = 0
    for i in range(meta.num_row_groups):
        chunk = meta.row_group(i).column(index)
        stats = chunk.statistics
        if stats is None or not stats.has_null_count:
            return None
        nulls += stats.null_count
        total += chunk.num_values
    if nulls == 0:
        return True
    return False if nulls == total else None


def request_id_ranges(refs) -> list | None:
    """``(host, lowest, highest)`` request id of every local Parquet span file, from footers only.

    None when some file's range is unknown (a stream, a remote file, no statistics): then
    nothing can be ruled out. Request ids compare as UTF-8 bytes, as Parquet orders them.
    """
    out = []
    for ref in refs:
        if ref.kind != "spans":
            continue
        if ref.stream or ref.filesystem_uri is not None:
            return None
        try:
            pf = pq.ParquetFile(open_input(ref), pre_buffer=False)
            index = pf.schema_arrow.get_field_index("request_id")
            if index < 0:
                continue  # no request ids at all: nothing to share
            meta = pf.metadata
            for i in range(meta.num_row_groups):
                chunk = meta.row_group(i).column(index)
                stats = chunk.statistics
                if stats is None or not stats.has_null_count:
                    return None
                if stats.null_count == chunk.num_values:
                    continue
                if not stats.has_min_max:
                    return None
                lo, hi = stats.min, stats.max
                lo = lo.encode() if isinstance(lo, str) else bytes(lo)
                hi = hi.encode() if isinstance(hi, str) else bytes(hi)
                out.append((ref.host, lo, hi))
        except (pa.ArrowException, OSError, ValueError, KeyError, IndexError):
            continue  # unreadable: the map step skips it too
    return out


def hosts_may_share_request_ids(refs) -> bool:
    """Whether two hosts' span files may hold the same request id (the cross-host clock check
    compares such requests). False only when the footers' id ranges prove they cannot: then
    the ids need not be decoded, and the check finds nothing, exactly as if they had been."""
    ranges = request_id_ranges(refs)
    return True if ranges is None else ranges_overlap_across_hosts(ranges)


def ranges_overlap_across_hosts(ranges: list) -> bool:
    """Whether any two ``(host, lo, hi)`` ranges of different hosts intersect."""
    # Sweep by lower bound: a range meets an earlier one of another host iff that one's upper
    # bound reaches its lower bound. Keep the largest upper bound of the two best hosts so far.
    ranges = sorted(ranges, key=lambda r: (r[1], r[2]))
    top: list = []  # [(hi, host)] of at most 2 distinct hosts, largest first
    for host, lo, hi in ranges:
        if any(top_host != host and top_hi >= lo for top_hi, top_host in top):
            return True
        best = max([hi] + [t[0] for t in top if t[1] == host])
        top = sorted([t for t in top if t[1] != host] + [(best, host)], reverse=True)[:2]
    return False
