"""One request, one count: the load client's spans joined to the server's spans of the same requests.

``loadprobe load --record`` writes one root span per request under the x-request-id it sent
(service ``schema.LOAD_CLIENT_SERVICE``); a server recorded with loadprobe records that id on its
request span (the ASGI/WSGI middlewares, ``request(id=...)``). Analysed together, the two are one
request seen from two sides (paired by that id, or by the trace id the client sent with it:
``ClientRequests.find``). The client's files are small (one span per request), so a pre-pass
(``client_requests``) reads the request ids, durations and stages of its root spans once; the map
step then hands every server file to ``join_client`` before its kernel runs. A server root span
whose request id the client saw gets a parent outside its file -- the client's span, which lives
in another file -- so the kernels (all three, unchanged) count it as a stage inside the request and
not as a request of its own; the client's span stays the request, counted once. The server's time
inside each joined request is taken off the client span's self time, so what is left of it is the
time outside the server (network, connections, the client's own queueing). Everything here is an
exact integer sum, so partials still merge in any order.

Usage::

    client = client_requests(client_runs, since_ns, until_ns)   # None: the client saw no request id
    cols = join_client(part, table, cols, client, ref.host)      # in map_step, per server file
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from .columns import SpanColumns, arrow_mask, arrow_rows, dictionary_codes, int_column, validity
from .dataset import file_refs
from .kernel_numpy import NS_PER_S, children_ns, count_values, sum_by
from .partials import Partial
from .pairing import client_keys, pair_ids
from .reading import UnreadableFile, read_data_file
from ..schema import LOAD_CLIENT_SERVICE

_NULL = -(2**62)  # a null dur_ns, told from a negative one (as map_step decodes it)


def is_load_client(service: str) -> bool:
    """Whether runs of ``service`` are ``loadprobe load --record``'s view of the requests it sent."""
    return service == LOAD_CLIENT_SERVICE


@dataclass(frozen=True, eq=False)
class ClientRequests:
    """The load client's requests (root spans with a request id, in the analysis' time window)."""

    ids: pa.Array  # request ids (strings), one per request
    ts: np.ndarray  # int64 start, epoch ns
    dur: np.ndarray  # int64 ns, 0 where the span has no duration
    stage: np.ndarray  # int64 index into ``stages`` of each request's span
    stages: tuple  # the client spans' stage names ("client")
    ok: np.ndarray  # bool: the client had its answer (not timed out, failed or cancelled)

    @property
    def count(self) -> int:
        return len(self.ids)

    @cached_property
    def _keys(self) -> pa.Array:
        return client_keys(self.ids)

    def find(self, ids) -> np.ndarray:
        """For each of ``ids`` (request ids a server recorded), the index of the client request it names, or
        -1 (``pair_ids``)."""
        return pair_ids(self._keys, ids)


@dataclass
class Joined:
    """What ``join_client`` did to one file."""

    requests: int  # the file's request roots the client saw
    left: int  # its request roots the client did not see (still requests of their own)


def client_requests(runs, since_ns: int | None = None, until_ns: int | None = None) -> ClientRequests | None:
    """The pre-pass: the request ids, durations and stages of the root spans in ``runs``' span files
    (the load client's), within the window; None when there are none. A file that cannot be read
    is passed over here: the map step skips it too, and says why."""
    ids, starts, durs, stages, oks, names = [], [], [], [], [], {}
    for ref in file_refs(runs):
        if ref.kind != "spans":
            continue
        try:
            table = read_data_file(ref).table
        except UnreadableFile:
            continue
        ts, parent = int_column(table, "ts_ns"), int_column(table, "parent_id", 0)
        dur = int_column(table, "dur_ns", fill=_NULL)
        keep = (parent == 0) & validity(table.column("request_id")) & ((dur >= 0) | (dur == _NULL))
        if since_ns is not None:
            keep &= ts >= since_ns
        if until_ns is not None:
            keep &= ts < until_ns
        if not keep.any():
            continue
        codes, file_names = dictionary_codes(table, "stage")
        local = np.array([names.setdefault(str(name), len(names)) for name in file_names] + [-1], dtype=np.int64)
        stages.append(local[codes[keep]])  # (-1 never appears: the stage column is required non-null)
        status, status_names = dictionary_codes(table, "status")
        answered = np.array([name == "ok" for name in status_names] + [True], dtype=bool)  # null: ok
        oks.append(answered[status[keep]])
        starts.append(ts[keep])
        kept = dur[keep]
        durs.append(np.where(kept == _NULL, 0, kept))
        ids.append(table.column("request_id").filter(arrow_mask(keep)).cast(pa.string()).combine_chunks())
    if not ids:
        return None
    return ClientRequests(pa.concat_arrays(ids), np.concatenate(starts), np.concatenate(durs), np.concatenate(stages),
                          tuple(names), np.concatenate(oks))


def join_client(part: Partial, table: pa.Table, cols: SpanColumns, client: ClientRequests,
                host: str) -> tuple[SpanColumns, Joined | None]:
    """``cols`` of a server file with its request roots that the client saw moved inside the client's
    requests (a parent outside the file), and their time taken off the client spans' self time in
    ``part``; None when the file holds no such root."""
    roots = (cols.parent == 0) & (cols.has_request if cols.has_request is not None else
                                  np.full(len(cols.ts), bool(cols.request_ids_known)))
    rows = np.flatnonzero(roots)
    if rows.size == 0 or cols.has_request is None:
        return cols, None
    where = client.find(table.column("request_id").take(arrow_rows(rows)))
    found = where >= 0
    if not found.any():
        return cols, None
    rows, where = rows[found], where[found]
    parent = cols.parent.copy()
    parent[rows] = _outside(cols.span_id)
    valid = cols.valid[rows]
    # A part of a request is no longer than the request: a WSGI span ends when its body is closed,
    # which under load can be after the client read the response. Clipped to the client's span (its
    # length: the two clocks may differ), the server's time is also what is taken off the client's own
    # (at most all of it). Not where the client gave up: a server working on past a client's timeout
    # worked that long.
    dur = cols.dur.copy()
    seen = client.dur[where]
    dur[rows] = np.where((seen > 0) & client.ok[where], np.minimum(dur[rows], seen), dur[rows])
    # Per client request, the server's time inside it: several server roots of one request (a span opened
    # without the request's context has no parent in the server's recording either) take at most all of it.
    requests, each = np.unique(where[valid], return_inverse=True)
    inner = np.minimum(np.bincount(each, weights=np.minimum(dur[rows], seen)[valid], minlength=len(requests)),
                       client.dur[requests]).astype(np.int64)
    codes, ns = sum_by(client.stage[requests], inner)
    for code, value in zip(codes.tolist(), ns.tolist()):
        sp = part.stage(client.stages[code])
        sp.self_ns -= value
        sp.self_in_request_ns -= value
    part.request_self_ns -= int(inner.sum())
    part.client_self_ns -= int(inner.sum())
    # The server span's own time (less its children's, as the kernels take it) is time in no probed
    # stage, as a root's is: kept apart, since the client span's self time is now the requests' own.
    part.joined_server_self_ns += _self_time(cols._replace(dur=dur), rows[valid])
    joined = int(np.unique(where).size)
    part.joined_requests += joined
    part.repeated_roots += int(rows.size) - joined
    # Their parent is the client's span, in another file: joined here, not unjoined (the kernels
    # count every valid child whose parent is not in its file).
    part.unjoined_children -= int(valid.sum())
    # The server's host served them: its energy per request counts them.
    for second, n in count_values(cols.ts[rows] // NS_PER_S).items():
        part.host_arrivals[(host, second)] = part.host_arrivals.get((host, second), 0) + n
    return cols._replace(parent=parent, dur=dur), Joined(int(rows.size), int(found.size - rows.size))


def _self_time(cols: SpanColumns, rows: np.ndarray) -> int:
    """Σ self time of the spans at ``rows`` (valid): each one's duration less its direct children's
    durations and recorded queue time, children joined within the file, floored at 0 (as the kernels)."""
    if rows.size == 0:
        return 0
    return int(np.maximum(cols.dur[rows] - children_ns(cols, cols.span_id[rows]), 0).sum())


def _outside(span_id: np.ndarray) -> int:
    """A parent id no span of the file has, and not 0 (a root's)."""
    for candidate in (-1, int(span_id.min()) - 1, int(span_id.max()) + 1):
        if candidate != 0 and -(2**63) <= candidate < 2**63 and not (span_id == candidate).any():
            return candidate
    ids = np.unique(span_id[span_id < 0])  # every id from min to -1 and max taken: a gap among the negatives
    gaps = np.flatnonzero(np.diff(ids) > 1)
    return int(ids[gaps[0]]) + 1
