"""OTLP spans as loadprobe spans: which attribute fills which column, GenAI spans opened into their phases.

One rule for the importer (OTLP files) and the live receiver. Each ``OtlpSpan`` becomes a row of
``schema.SPANS``, grouped by where it ran: its resource's ``host.name`` and ``service.name``.

- A span that starts a request (``OtlpSpan.starts_request``: no parent, or a parent in another
  process) is a root: ``parent_id`` null. Whether it is a request and what its spans' ``request_id``
  is: ``Converter`` (server and consumer spans are requests; ids from ``x-request-id`` or the trace).
- Columns come from attributes (``ATTRIBUTE_KEYS``: loadprobe's own ``loadprobe.*`` keys and the
  GenAI semantic conventions' token counts; the first key present wins). ``AttributeKeys.parse``
  takes ``FIELD=KEY`` remappings (``loadprobe import --attr batch=app.batch_size``).
- Status ERROR is ``error`` (``timeout`` or ``cancelled`` when its message says so), anything else ``ok``.
- A span carrying the GenAI latency attributes that vLLM's ``llm_request`` has
  (``gen_ai.latency.time_to_first_token``, ``time_in_queue``, ``time_in_model_prefill``,
  ``time_in_model_decode``, ``e2e``) is a request with three stages below it: ``queue``, then
  ``prefill`` ending at the first token (so its end minus the request's start is the recorded
  TTFT), then ``decode``; the request lasts ``e2e``. Doubles are seconds, integers nanoseconds.

Usage::

    from loadprobe.record.otlp_spans import AttributeKeys, Converter

    converter = Converter(AttributeKeys.parse(["batch=app.batch_size"]))
    for (host, service), table in converter.add(spans):   # full batches, as they fill
        ...
    for (host, service), table in converter.drain():      # whatever is left
        ...
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Iterator

import pyarrow as pa

from .._errors import LoadprobeError
from ..schema import FIRST_TOKEN, LAST_TOKEN, SPANS
from .otlp import INVALID_PARENT, SPAN_KIND_CONSUMER, SPAN_KIND_SERVER, STATUS_ERROR, OtlpSpan

ATTRIBUTE_KEYS = {
    "batch": ("loadprobe.batch",),
    "shape": ("loadprobe.shape",),
    "engine": ("loadprobe.engine",),
    "queue_ns": ("loadprobe.queue_ns",),
    "flops": ("loadprobe.flops",),
    "bytes": ("loadprobe.bytes",),
    "tokens_in": ("loadprobe.tokens_in", "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    "tokens_out": ("loadprobe.tokens_out", "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    "request_id": ("loadprobe.request_id", "http.request.header.x-request-id", "http.request.header.x_request_id"),
}
"""For each column filled from attributes, the attribute keys read, in order (docs/ecosystem.md)."""

GENAI_TTFT = "gen_ai.latency.time_to_first_token"
GENAI_QUEUE = "gen_ai.latency.time_in_queue"
GENAI_PREFILL = "gen_ai.latency.time_in_model_prefill"
GENAI_DECODE = "gen_ai.latency.time_in_model_decode"
GENAI_E2E = "gen_ai.latency.e2e"
GENAI_PHASES = ("queue", "prefill", "decode")
"""The stages a GenAI request span is opened into, in the order they run."""

BATCH_ROWS = 65_536
"""Rows gathered per (host, service) before they are handed on as one table."""

MAX_HELD_S = 120.0
"""Seconds a span is held for its root before it is written with its trace id (a receiver's recording
is never held back longer; files are settled at their end)."""

MAX_UNDECIDED_S = 600.0
"""Seconds a root of no server kind waits for its service's first server span before it is written as a
request: long enough for an engine's startup traces to meet the first request that follows them."""

MAX_HELD_ROWS = 20_000
"""Rows per (host, service) held waiting for their trace's root, and rows held under roots not yet known
to be requests (each bound): what a trace of in-flight requests needs, without growing with the input."""

UNNAMED_SERVICE = "otlp"  # where spans whose resource names no service.name go
_ID_BITS = (1 << 63) - 1
_END_NS = 2**63  # spans end before this, in int64 epoch nanoseconds
_INTEGERS = ("batch", "queue_ns", "tokens_in", "tokens_out")
_MAX_COUNT = 2**53


class AttributeKeys:
    """The attribute keys read for each column: ``ATTRIBUTE_KEYS`` with the user's remappings."""

    def __init__(self, keys: dict | None = None) -> None:
        self.keys = dict(keys or ATTRIBUTE_KEYS)
        # key -> (column, rank): a span's few attributes are looked up, not every key of every column
        self._by_key = {key: (name, rank) for name, chosen in self.keys.items() for rank, key in enumerate(chosen)}

    @classmethod
    def parse(cls, remaps=()) -> "AttributeKeys":
        """``["batch=app.batch", "tokens_in=llm.prompt_tokens"]``: each FIELD read from KEY instead (a
        field named twice is read from its keys in the order given). LoadprobeError on a bad one."""
        keys, given = dict(ATTRIBUTE_KEYS), {}
        for remap in remaps:
            name, sep, key = str(remap).partition("=")
            name, key = name.strip(), key.strip()
            if not sep or not key or name not in ATTRIBUTE_KEYS:
                raise LoadprobeError(f"--attr {remap!r}: expected FIELD=KEY with FIELD one of "
                                     f"{', '.join(ATTRIBUTE_KEYS)} (e.g. batch=app.batch_size)")
            given.setdefault(name, []).append(key)
        keys.update({name: tuple(chosen) for name, chosen in given.items()})
        return cls(keys)

    def columns(self, attributes: dict) -> dict:
        """The columns ``attributes`` fill: {column: raw value}, the first of its keys present winning."""
        found: dict = {}
        for key, value in attributes.items():
            hit = self._by_key.get(key)
            if hit is None or value is None:
                continue
            name, rank = hit
            if name not in found or rank < found[name][0]:
                found[name] = (rank, value)
        return {name: value for name, (_, value) in found.items()}


class _Columns:
    """One (host, service)'s rows being gathered, turned into columns once, when they make a table."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, row: dict) -> None:
        self.rows.append(row)

    def table(self) -> pa.Table:
        arrays = []
        for f in SPANS:
            name = f.name
            values = [row.get(name) for row in self.rows]
            if pa.types.is_dictionary(f.type):
                arrays.append(pa.array(values, pa.string()).dictionary_encode())
            else:
                arrays.append(pa.array(values, f.type))
        return pa.Table.from_arrays(arrays, schema=SPANS)


class _Group:
    """One (host, service): rows ready to be written, and rows held until it is known whose request they are."""

    def __init__(self) -> None:
        self.ready = _Columns()
        # trace id -> (when its first span came, {parent span id: [rows of each span under it]}): spans whose
        # local root has not come yet, indexed by parent so that a root takes its own subtree and no other
        self.waiting: OrderedDict[str, tuple[float, dict[int, list[list[dict]]]]] = OrderedDict()
        self.waiting_rows = 0
        self.undecided: list[tuple[float, list[dict], str | None]] = []  # (when, a trace's rows, its request id)
        self.undecided_rows = 0  # under roots that are requests only if the service serves none
        self.serving = False  # it has sent a server or consumer span: its other roots are not requests
        self.requests = 0
        # span id -> its request id (bounded), for work that outlives its parent. OrderedDict: the oldest
        # goes in O(1), where a dict's next(iter()) walks past every slot deleted before it
        self.settled: OrderedDict[int, str | None] = OrderedDict()


class Converter:
    """OTLP spans in, SPANS tables out, per (host, service); counts what it could not use.

    Which spans make a request is decided once a span's local root (``OtlpSpan.starts_request``)
    has arrived -- exporters send a span when it ends, so children come first and wait for it (each
    root takes the spans below it, not every span of its trace): a server or consumer span is a
    request; another kind of root (a startup step, a batch job, a span started without a kind) is a
    request only in a service that sends no server or consumer span, so such roots wait until the
    service shows one (then they are recorded outside requests), or until ``MAX_UNDECIDED_S`` or the
    end (then they are its requests). Every span of a request carries the request's id (its root's
    ``x-request-id``, else the trace id); work that ends after its root joins it. What is held is
    bounded (``MAX_HELD_ROWS`` rows per group, each kind, and ``MAX_HELD_S``/``MAX_UNDECIDED_S``): past
    them, spans still waiting for a root are written with their trace id as request id, and undecided
    roots as requests.
    """

    def __init__(self, keys: AttributeKeys | None = None, *, service: str | None = None,
                 host: str | None = None, unnamed_host: str = "imported") -> None:
        self.keys = keys or AttributeKeys()
        self.service, self.host = service, host  # given: every span is put there
        self.unnamed_host = unnamed_host  # where spans whose resource names no host.name go
        self.groups: dict[tuple[str, str], _Group] = {}
        self.spans = 0  # OTLP spans taken
        self.skipped: dict[str, int] = {}  # OTLP spans left out, by reason

    @property
    def requests(self) -> dict[tuple[str, str], int]:
        """Requests decided so far, per (host, service)."""
        return {where: group.requests for where, group in self.groups.items() if group.requests}

    @property
    def ready_rows(self) -> int:
        """Rows settled and not yet handed on as a table (the receiver's memory cap counts them)."""
        return sum(len(g.ready) for g in self.groups.values())

    def add(self, spans: list[OtlpSpan]) -> Iterator[tuple[tuple[str, str], pa.Table]]:
        """Take ``spans``; yield ((host, service), table) for each group that reached BATCH_ROWS."""
        now = time.monotonic()
        for span in spans:
            reason = _unusable(span)
            if reason:
                self.skipped[reason] = self.skipped.get(reason, 0) + 1
                continue
            self.spans += 1
            where = (self.host or span.host or self.unnamed_host, self.service or span.service or UNNAMED_SERVICE)
            group = self.groups.get(where) or self.groups.setdefault(where, _Group())
            self._take(group, span, now)
            if len(group.ready) >= BATCH_ROWS:
                yield where, group.ready.table()
                group.ready = _Columns()

    def drain(self, final: bool = False) -> Iterator[tuple[tuple[str, str], pa.Table]]:
        """Every group's ready rows, as a table (a receiver's flush), after settling what has waited too
        long; ``final`` (the end of a file, a receiver's stop) settles everything that waits."""
        now = float("inf") if final else time.monotonic()
        for where, group in self.groups.items():
            while group.undecided and group.undecided[0][0] <= now - MAX_UNDECIDED_S:
                self._settle_oldest_undecided(group)
            while group.waiting and next(iter(group.waiting.values()))[0] <= now - MAX_HELD_S:
                self._release_oldest_waiting(group)
            if len(group.ready):
                yield where, group.ready.table()
                group.ready = _Columns()

    def _take(self, group: _Group, span: OtlpSpan, now: float) -> None:
        rows, request_id = self.rows(span)
        if not span.starts_request:
            if span.parent_id in group.settled:  # its parent was written already: work that outlived it
                self._settle(group, rows + self._subtree(group, span.trace_id, span.span_id),
                             group.settled[span.parent_id], request=False)
                return
            group.waiting.setdefault(span.trace_id, (now, {}))[1].setdefault(span.parent_id, []).append(rows)
            group.waiting_rows += len(rows)
            while group.waiting_rows > MAX_HELD_ROWS:
                self._release_oldest_waiting(group)
            return
        rows += self._subtree(group, span.trace_id, span.span_id)
        if span.kind in (SPAN_KIND_SERVER, SPAN_KIND_CONSUMER):
            group.serving = True
            while group.undecided:  # the service serves: its other roots are not requests
                _, held, _ = group.undecided.pop(0)
                group.undecided_rows -= len(held)
                self._settle(group, held, None)
            self._settle(group, rows, request_id)
        elif group.serving:
            self._settle(group, rows, None)
        else:
            group.undecided.append((now, rows, request_id))
            group.undecided_rows += len(rows)
            while group.undecided_rows > MAX_HELD_ROWS:
                self._settle_oldest_undecided(group)

    def _subtree(self, group: _Group, trace_id: str, span_id: int) -> list[dict]:
        """The waiting rows below ``span_id`` in its trace, taken out of the wait."""
        entry = group.waiting.get(trace_id)
        if entry is None:
            return []
        by_parent, out, below = entry[1], [], [span_id]
        while below:
            for span_rows in by_parent.pop(below.pop(), ()):
                out += span_rows
                below.append(span_rows[0]["span_id"])
        group.waiting_rows -= len(out)
        if not by_parent:
            del group.waiting[trace_id]
        return out

    def _settle(self, group: _Group, rows: list[dict], request_id: str | None, request: bool = True) -> None:
        """``rows`` ready to write, in the request ``request_id`` or in none; ``request``: they start one (a
        root first), else they are late children of spans settled before. Their span ids are remembered
        (bounded) for work that ends after its parent."""
        group.requests += request and request_id is not None
        settled = group.settled
        for row in rows:
            row["request_id"] = request_id
            group.ready.append(row)
            settled[row["span_id"]] = request_id
        while len(settled) > MAX_HELD_ROWS:
            settled.popitem(last=False)

    def _settle_oldest_undecided(self, group: _Group) -> None:
        """The oldest root still undecided, written as a request (the service has shown no server span)."""
        _, rows, request_id = group.undecided.pop(0)
        group.undecided_rows -= len(rows)
        self._settle(group, rows, request_id)

    def _release_oldest_waiting(self, group: _Group) -> None:
        trace_id, (_, by_parent) = group.waiting.popitem(last=False)
        for span_rows in (r for rows in by_parent.values() for r in rows):
            group.waiting_rows -= len(span_rows)
            for row in span_rows:  # their root never came (sampled out, not sent, elsewhere): the trace names them
                row["request_id"] = trace_id or None
                group.ready.append(row)

    def rows(self, span: OtlpSpan) -> tuple[list[dict], str | None]:
        """The loadprobe span rows of one OTLP span (one, or a GenAI request and its phases), and the id
        of the request it would start: its x-request-id attribute, else its trace id."""
        attributes, root = span.attributes, span.starts_request
        row = {"ts_ns": span.start_ns, "dur_ns": span.end_ns - span.start_ns, "stage": span.name or "span",
               "span_id": span.span_id, "parent_id": None if root else span.parent_id, "status": _status(span)}
        if attributes:
            for name, value in self.keys.columns(attributes).items():
                row[name] = _column_value(name, value)
        request_id = row.pop("request_id", None) or span.trace_id or None
        return [row] + genai_phases(row, attributes), request_id


def genai_phases(request: dict, attributes: dict) -> list[dict]:
    """The queue, prefill and decode rows below a GenAI request span (``request`` gets its e2e as duration),
    and the markers of its output: ``schema.FIRST_TOKEN`` from the request's start to its first token,
    ``schema.LAST_TOKEN`` from there to the decode's end.

    vLLM measures queue, prefill and decode on the engine's clock and TTFT and e2e from the
    request's arrival: prefill is placed to end at the first token, queue just before it, decode
    right after it, so that TTFT and e2e read back exactly; the time before the queue and after
    decode is the request's own (its front end: tokenising, detokenising, streaming).
    """
    if GENAI_TTFT not in attributes and GENAI_PREFILL not in attributes and GENAI_DECODE not in attributes:
        return []
    seconds = {key: _duration_ns(attributes.get(key)) for key in (GENAI_TTFT, GENAI_QUEUE, GENAI_PREFILL,
                                                                  GENAI_DECODE, GENAI_E2E)}
    if seconds[GENAI_PREFILL] is None and seconds[GENAI_DECODE] is None and seconds[GENAI_TTFT] is None:
        return []
    start = request["ts_ns"]
    if seconds[GENAI_E2E] is not None and start + seconds[GENAI_E2E] < _END_NS:
        request["dur_ns"] = seconds[GENAI_E2E]
    end = start + request["dur_ns"]
    queue, prefill, decode = (seconds[k] or 0 for k in (GENAI_QUEUE, GENAI_PREFILL, GENAI_DECODE))
    first_token = start + (seconds[GENAI_TTFT] if seconds[GENAI_TTFT] is not None else queue + prefill)
    phases = (("queue", GENAI_QUEUE, first_token - prefill - queue, first_token - prefill),
              ("prefill", GENAI_PREFILL, first_token - prefill, first_token),
              ("decode", GENAI_DECODE, first_token, first_token + decode))
    rows = []
    for k, (phase, key, begin, finish) in enumerate(phases, 1):
        if seconds[key] is None:
            continue
        begin, finish = (min(max(t, start), end) for t in (begin, finish))
        row = {"ts_ns": begin, "dur_ns": finish - begin, "stage": phase,
               "span_id": (request["span_id"] * 8 + k) & _ID_BITS or k, "parent_id": request["span_id"],
               "status": request["status"], "engine": request.get("engine")}
        if phase == "prefill":
            row["tokens_in"] = request.get("tokens_in")
        if phase == "decode" and request.get("tokens_out"):
            row["tokens_out"] = request["tokens_out"] - 1  # the first token came out of prefill
        rows.append(row)
    if start <= first_token <= end:
        marks = [(FIRST_TOKEN, start, first_token)]
        if seconds[GENAI_DECODE] is not None:
            marks.append((LAST_TOKEN, first_token, min(first_token + decode, end)))
        for k, (stage, begin, finish) in enumerate(marks, 4):  # ids after the phases (1-3)
            rows.append({"ts_ns": begin, "dur_ns": finish - begin, "stage": stage,
                         "span_id": (request["span_id"] * 8 + k) & _ID_BITS or k, "parent_id": request["span_id"],
                         "status": request["status"]})
    return rows


def _duration_ns(value) -> int | None:
    """A GenAI latency attribute in ns: a double is seconds (vLLM), an integer nanoseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    ns = value * 1e9 if isinstance(value, float) else value
    return int(round(ns)) if 0 <= ns < 2**62 else None


def _column_value(name: str, value):
    """An attribute's value for column ``name``; None when it cannot be one (counted by nobody: optional).

    An array is a shape's dims (``[4, 3, 224]`` -> ``4x3x224``); for any other column its first item
    (a captured header arrives as a one-item array)."""
    if isinstance(value, list):
        if name == "shape":
            return "x".join(str(v) for v in value) or None
        value = value[0] if value else None
        if value is None:
            return None
    if name in ("shape", "engine", "request_id"):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    if name in _INTEGERS:
        return int(number) if 0 <= number <= _MAX_COUNT and number == int(number) else None
    return number if number >= 0 and number != float("inf") else None


def _status(span: OtlpSpan) -> str:
    if span.status != STATUS_ERROR:
        return "ok"
    message = span.status_message.lower()
    return "timeout" if "timeout" in message or "timed out" in message else \
        "cancelled" if "cancel" in message else "error"


def _unusable(span: OtlpSpan) -> str | None:
    if not span.span_id:
        return "spans with no valid span id"
    if not span.trace_id:
        return "spans with no valid trace id"
    if span.parent_id == INVALID_PARENT:
        return "spans with an invalid parent id"
    if span.start_ns <= 0 or span.end_ns < span.start_ns or span.end_ns >= _END_NS:
        return "spans with a bad start or end time"
    return None
