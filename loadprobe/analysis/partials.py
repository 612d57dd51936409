"""Partial aggregates of recorded data, and their merging in any order (the reduce step).

A partial holds only sums, counts and HdrHistogram-bucket counts (``histogram.py``), all
exact integers except a few float sums kept as lists and added with ``math.fsum`` at the
end, so merging is associative and commutative: the same files give the same portrait
in-process, in a process pool or on Dask, in any order and any split. ``map_step.py``
fills one from each file; ``finalize.py`` turns the merged one into a Portrait.

Usage::

    part = map_file(ref, Filters())          # map_step.py
    total = merge([part, other_part])
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .histogram import Histogram
from .llm import LlmPartial

MAX_SHAPES = 10_000  # distinct shapes kept per stage; the rest are counted as "(other)"


@dataclass
class StagePartial:
    latency: Histogram = field(default_factory=Histogram)
    count: int = 0
    self_ns: int = 0
    in_request_ns: int = 0
    self_in_request_ns: int = 0
    statuses: Counter = field(default_factory=Counter)
    queue: Histogram = field(default_factory=Histogram)
    batch: Counter = field(default_factory=Counter)
    fit: list = field(default_factory=list)  # per file [n, Σb, Σb², Σl, Σbl, Σl²] with l in ms
    shapes: Counter = field(default_factory=Counter)
    shapes_overflow: int = 0
    engines: Counter = field(default_factory=Counter)
    flops: list = field(default_factory=list)  # per file Σflops
    bytes: list = field(default_factory=list)
    flops_dur_ns: int = 0
    bytes_dur_ns: int = 0
    tokens_in: Histogram = field(default_factory=Histogram)
    tokens_out: Histogram = field(default_factory=Histogram)
    offset_ns: int = 0  # Σ (start - parent's start) over spans whose parent is in the same file
    offset_n: int = 0
    cpu_ns: int = 0  # over spans sampled for their CPU (cpu_time.py): their own CPU,
    cpu_own_ns: int = 0  # their own time,
    cpu_spans: int = 0  # and how many there were

    def merge(self, o: StagePartial) -> StagePartial:
        self.latency.merge(o.latency)
        self.queue.merge(o.queue)
        self.tokens_in.merge(o.tokens_in)
        self.tokens_out.merge(o.tokens_out)
        self.count += o.count
        self.self_ns += o.self_ns
        self.in_request_ns += o.in_request_ns
        self.self_in_request_ns += o.self_in_request_ns
        self.offset_ns += o.offset_ns
        self.offset_n += o.offset_n
        self.cpu_ns += o.cpu_ns
        self.cpu_own_ns += o.cpu_own_ns
        self.cpu_spans += o.cpu_spans
        add_counts(self.statuses, o.statuses)
        add_counts(self.batch, o.batch)
        self.fit += o.fit
        add_counts(self.engines, o.engines)
        self.flops += o.flops
        self.bytes += o.bytes
        self.flops_dur_ns += o.flops_dur_ns
        self.bytes_dur_ns += o.bytes_dur_ns
        add_counts(self.shapes, o.shapes)
        self.shapes_overflow += o.shapes_overflow
        self.trim_shapes()
        return self

    def trim_shapes(self) -> None:
        """Keep the MAX_SHAPES most frequent shapes; the others' spans are counted as overflow."""
        if len(self.shapes) > MAX_SHAPES:
            keep = dict(sorted(self.shapes.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_SHAPES])
            self.shapes_overflow += sum(self.shapes.values()) - sum(keep.values())
            self.shapes = Counter(keep)


@dataclass
class Partial:
    """Everything the portrait needs from some set of files."""

    files: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)  # path -> reason
    rows: int = 0
    rows_filtered: int = 0
    null_durations: int = 0
    negative_durations: int = 0
    unjoined_children: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    stages: dict = field(default_factory=dict)  # name -> StagePartial
    requests: Histogram = field(default_factory=Histogram)
    request_count: int = 0
    request_statuses: Counter = field(default_factory=Counter)
    request_total_ns: int = 0
    request_self_ns: int = 0
    request_queue_ns: int = 0  # queue time recorded by spans inside requests (waiting before a stage)
    joined_requests: int = 0  # the load client's requests the server's request spans joined (requestjoin.py)
    repeated_roots: int = 0  # server root spans joined to a client request another root of the same file joined
    joined_server_self_ns: int = 0  # their own time (in no probed stage of the server)
    client_requests: int = 0  # the load client's requests (set once, after the map: run.py)
    client_self_ns: int = 0  # their own time less the server's time joined into them: outside the server
    arrivals: Counter = field(default_factory=Counter)  # epoch second -> requests started
    root_arrivals: Counter = field(default_factory=Counter)  # epoch second -> root spans started
    host_arrivals: Counter = field(default_factory=Counter)  # (host, epoch second) -> requests started
    gaps: dict = field(default_factory=dict)  # run -> [n, Σgap_s, Σgap_s²] per file, as lists
    busy: Counter = field(default_factory=Counter)  # (host, stage, second) -> ns of stage time started then
    samples: dict = field(default_factory=dict)  # (host, device, metric) -> SamplePartial
    # Energy attribution (analysis/energy.py): stage spans that name their engine.
    engine_busy: Counter = field(default_factory=Counter)  # (host, engine, stage, second) -> ns overlapping it
    engine_items: Counter = field(default_factory=Counter)  # (host, engine, stage, second started) -> items
    engine_tokens: Counter = field(default_factory=Counter)  # (host, engine, stage) -> tokens in + out
    engine_union: Counter = field(default_factory=Counter)  # (host, engine, second) -> ns it had any work
    out_of_window: Counter = field(default_factory=Counter)  # run -> spans outside the run's own start/stop
    skew: dict = field(default_factory=dict)  # request id -> list of (host, start, end, is_root)
    llm: LlmPartial = field(default_factory=LlmPartial)  # LLM requests and token markers (llm.py)

    def stage(self, name: str) -> StagePartial:
        part = self.stages.get(name)
        if part is None:
            part = self.stages[name] = StagePartial()
        return part

    def merge(self, o: Partial) -> Partial:
        self.files += o.files
        self.skipped.update(o.skipped)
        for name in ("rows", "rows_filtered", "null_durations", "negative_durations", "unjoined_children",
                     "request_count", "request_total_ns", "request_self_ns", "request_queue_ns", "joined_requests",
                     "repeated_roots", "joined_server_self_ns", "client_requests", "client_self_ns"):
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.first_ns = pick(min, self.first_ns, o.first_ns)
        self.last_ns = pick(max, self.last_ns, o.last_ns)
        for name, part in o.stages.items():
            self.stage(name).merge(part)
        self.requests.merge(o.requests)
        add_counts(self.request_statuses, o.request_statuses)
        add_counts(self.arrivals, o.arrivals)
        add_counts(self.root_arrivals, o.root_arrivals)
        add_counts(self.host_arrivals, o.host_arrivals)
        for run, values in o.gaps.items():
            self.gaps.setdefault(run, []).extend(values)
        add_counts(self.busy, o.busy)
        add_counts(self.engine_busy, o.engine_busy)
        add_counts(self.engine_items, o.engine_items)
        add_counts(self.engine_tokens, o.engine_tokens)
        add_counts(self.engine_union, o.engine_union)
        for key, part in o.samples.items():
            self.samples.setdefault(key, SamplePartial()).merge(part)
        add_counts(self.out_of_window, o.out_of_window)
        for rid, seen in o.skew.items():
            self.skew.setdefault(rid, []).extend(seen)
        self.llm.merge(o.llm)
        return self


@dataclass
class SamplePartial:
    """One device metric on one host: per-second sums and counts, and the extremes."""

    per_second: Counter = field(default_factory=Counter)  # second -> Σvalue
    per_second_n: Counter = field(default_factory=Counter)
    # energy_j only: seconds of each second the readings' intervals cover (their joules are split over them)
    per_second_covered: Counter = field(default_factory=Counter)
    count: int = 0
    max: float | None = None

    def merge(self, o: SamplePartial) -> SamplePartial:
        add_counts(self.per_second, o.per_second)
        add_counts(self.per_second_n, o.per_second_n)
        add_counts(self.per_second_covered, o.per_second_covered)
        self.count += o.count
        self.max = pick(max, self.max, o.max)
        return self


def pick(fn, a, b):
    """``fn(a, b)``, or whichever of the two is not None (None when both are)."""
    return b if a is None else a if b is None else fn(a, b)


def add_counts(target: Counter, source) -> None:
    """``target.update(source)`` for counts (``source``: a mapping, or (key, count) pairs with
    distinct keys), about twice as fast: ``Counter.update`` loops in Python over a non-empty
    counter, and this runs under the GIL for every file mapped."""
    if not target:
        dict.update(target, source)
        return
    get = target.get
    pairs = source.items() if isinstance(source, dict) else source
    dict.update(target, {key: get(key, 0) + value for key, value in pairs})


def merge(partials) -> Partial:
    """Merge any number of partials (the reduce step)."""
    total = Partial()
    for part in partials:
        total.merge(part)
    return total
