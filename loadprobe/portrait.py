"""The load portrait: a versioned tree of plain dataclasses, the only input of report and recommend.

Every field is defined in docs/metrics.md. Times are milliseconds unless the name says
otherwise; shares are fractions (0.25 = 25%).

Usage::

    portrait = loadprobe.analyze(["data/"])
    portrait.save("loadprobe-report/portrait.json")
    again = Portrait.load("loadprobe-report/portrait.json")
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from ._errors import LoadprobeError, read_json
from ._files import write_file
from .formats import PORTRAIT

PORTRAIT_VERSION = PORTRAIT.version
_DIGITS = 9  # significant digits kept for floats: merge order cannot change the portrait


@dataclass
class Percentiles:
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    max: float | None = None
    mean: float | None = None
    count: int = 0

    def _problem(self) -> str | None:
        """What a portrait.json's percentiles must obey beyond their types: all figures, or none."""
        given = [getattr(self, f) is not None for f in ("p50", "p90", "p95", "p99", "p999", "max", "mean")]
        return None if all(given) or not any(given) else "expected every percentile or none, got some null"


@dataclass
class Window:
    start: str
    end: str
    rate_per_s: float


@dataclass
class Traffic:
    source: str  # "requests" (request roots) or "root spans" when nothing used loadprobe.request
    requests: int
    duration_s: float
    bucket_s: int
    series: list[tuple[float, float]]  # [[bucket start, epoch seconds], requests in the bucket]
    mean_rps: float
    peak_rps: float
    peak_to_mean: float | None
    peak_window: Window | None
    valley_window: Window | None
    hour_of_day: list[float | None] | None  # 24 mean rates (UTC), when the data spans a day or more
    interarrival_cv: float | None
    dispersion_index: dict[str, float | None]  # {"1s": ..., "60s": ...}: variance / mean of counts per window


@dataclass
class BatchFit:
    a_ms: float
    b_ms_per_item: float
    r2: float | None
    n: int


@dataclass
class Batch:
    mean: float
    p50: int
    p99: int
    max: int
    distribution: dict[str, int]  # batch size -> spans (the 64 most frequent)
    fit: BatchFit | None
    other: int = 0  # spans whose batch size is not among the 64 in ``distribution`` (1.5)
    other_sizes: int = 0  # how many distinct sizes those are (1.5)


@dataclass
class Shapes:
    distinct: int
    top: str
    top_share: float
    dynamic_shape: bool
    top_shapes: list[tuple[str, int]]  # [[shape, spans], ...] up to 10


@dataclass
class Roofline:
    device: str
    precision: str
    ridge_flops_per_byte: float
    bound: str  # "compute" | "memory"
    roof_flops_per_s: float
    pct_of_roof: float | None


@dataclass
class Intensity:
    flops: float | None
    bytes: float | None
    flops_per_byte: float | None
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    roofline: Roofline | None = None


@dataclass
class Bounds:
    """A figure and its 95% interval (docs/metrics.md#energy)."""

    mean: float
    lo: float
    hi: float


@dataclass
class Stage:
    name: str
    count: int
    latency_ms: Percentiles
    share: float | None  # of end-to-end request time
    self_share: float | None
    self_ms_mean: float | None
    child_ms_mean: float | None
    queue_ms: Percentiles | None
    error_rate: float
    timeout_rate: float
    cancelled_rate: float
    engines: dict[str, int]  # engine -> spans
    batch: Batch | None
    shapes: Shapes | None
    intensity: Intensity | None
    tokens_in: Percentiles | None = None
    tokens_out: Percentiles | None = None
    start_offset_ms: float | None = None  # mean start after its request's (root span's) start (1.1; 1.4: root)
    latency_cdf: list[tuple[float, float]] | None = None  # [[ms, fraction of spans <= ms], ...], at most 200 points (1.2)
    energy_per_item_j: Bounds | None = None  # its devices' attributed energy per item it processed (1.7)
    energy_per_request_j: Bounds | None = None  # ... per request that arrived while they were sampled (1.7)
    energy_per_token_j: Bounds | None = None  # ... per token, where tokens are recorded (1.7)
    # The share of its own time its thread used a core, over the spans sampled for it (data format 1.1):
    # below 1 it also waited (a downstream call, a sleep, the interpreter lock). None: none sampled (1.11).
    cpu_share: float | None = None
    cpu_spans: int | None = None


@dataclass
class Requests:
    count: int
    latency_ms: Percentiles | None
    error_rate: float
    timeout_rate: float
    unattributed_share: float | None  # request time inside no probed stage
    latency_cdf: list[tuple[float, float]] | None = None  # [[ms, fraction of requests <= ms], ...], at most 200 points (1.2)
    queued_share: float | None = None  # request time its stages spent queued (recorded queue_ns) (1.5)
    # The load client's recording joined to the server's by request id (1.8): requests the server's
    # spans were found for, of ``count``; and the time in the client's spans outside the server's
    # (network, connections, the client's own queueing), as a share of request time.
    joined_requests: int | None = None
    outside_server_share: float | None = None


@dataclass
class LlmLatency:
    """An LLM latency over requests (TTFT, TPOT, E2E) or over output gaps (ITL), in milliseconds."""

    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    count: int


@dataclass
class TokenCounts:
    mean: float
    p50: float
    p99: float
    max: int
    total: int


@dataclass
class TokenRate:
    mean: float  # tokens per second over the requests' window
    peak: float  # the busiest whole second


@dataclass
class Goodput:
    ttft_ms: float  # the targets held to
    tpot_ms: float | None  # None: no request had a second token
    derived: list[str]  # the targets not given (twice the recorded median), by field name
    requests: int  # requests that succeeded within both targets
    share: float  # of the LLM requests
    rps: float | None  # per second of the requests' window
    # The share as one target moves and the other stays: [[target ms, share], ...] (display)
    by_ttft: list[tuple[float, float]] = field(default_factory=list)
    by_tpot: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class TtftSplit:
    """Where time to first token goes, as the engine recorded it (means, ms), and what the client saw more."""

    requests: int  # the engine's requests with a first token and a recorded queue or prefill
    queue_ms: float  # waiting to be scheduled: a "queue" span, or the prefill's recorded queue time
    prefill_ms: float
    rest_ms: float  # the engine's TTFT less both: its front end (parsing, tokenizing), before and between
    paired: int  # requests seen by both the load client and the engine (joined by request id)
    outside_ms: float | None  # over those: the client's TTFT less the engine's (network, HTTP, the client)


@dataclass
class TokenSeries:
    start: int  # epoch seconds of the first bucket
    bucket_s: int
    output_per_s: list[float]  # mean output tokens per second in each bucket
    input_per_s: list[float]


@dataclass
class EngineLevel:
    mean: float  # time-weighted, over the engine's requests' window (spans) or the LLM requests' (scraped)
    peak: float  # the highest reading, or the most at once
    source: str  # "scraped": the engine's own metric (--scrape); "spans": counted from its requests' phases


@dataclass
class EngineSeries:
    """The engine's running and waiting requests over time, counted from its spans (display)."""

    start: int  # epoch seconds of the first bucket
    bucket_s: int
    running: list[float]  # mean sequences running in each bucket
    waiting: list[float] | None


@dataclass
class EngineLoad:
    """The engine's running batch, its queue and its KV cache, over the LLM requests' window (1.10)."""

    running: EngineLevel | None  # sequences scheduled: in prefill or decode (the running batch)
    waiting: EngineLevel | None  # requests waiting to be scheduled
    kv_cache_pct: EngineLevel | None  # of its KV cache in use (scraped only)
    series: EngineSeries | None = None  # from the spans, where not scraped (scraped series are in the timeline)


@dataclass
class Llm:
    source: str  # "client": loadprobe load --openai's view; "service": the engine's own spans or OpenTelemetry
    requests: int  # request spans that carry tokens_out
    ttft_ms: LlmLatency | None
    itl_ms: LlmLatency | None  # between pieces of output; null where only the first token is timed
    tpot_ms: LlmLatency | None
    e2e_ms: LlmLatency | None  # of the requests that succeeded
    tokens_in: TokenCounts | None
    tokens_out: TokenCounts | None
    output_tokens_per_s: TokenRate | None
    input_tokens_per_s: TokenRate | None
    goodput: Goodput | None
    # Display data for the report: CDFs as [[ms, fraction <= ms], ...], tokens per second over time,
    # requests by prompt and output length ([[prompt tokens from, output tokens from, requests], ...]).
    ttft_cdf: list[tuple[float, float]] | None = None
    tpot_cdf: list[tuple[float, float]] | None = None
    itl_cdf: list[tuple[float, float]] | None = None
    tokens_series: TokenSeries | None = None
    lengths: list[tuple[int, int, int]] | None = None
    ttft_split_ms: TtftSplit | None = None
    engine: EngineLoad | None = None  # (1.10)


@dataclass
class DeviceMetric:
    host: str
    device: str
    metric: str
    mean: float  # time-weighted: the mean over the seconds it was sampled
    p95: float
    max: float
    seconds: int


@dataclass
class StageUtilisation:
    stage: str
    host: str
    device: str
    util_pct: float  # mean device utilisation weighted by the stage's time in each second


@dataclass
class Devices:
    metrics: list[DeviceMetric] = field(default_factory=list)
    utilisation_by_stage: list[StageUtilisation] = field(default_factory=list)
    idle_share: dict[str, float | None] = field(default_factory=dict)  # "host/device" -> share of seconds under 5% util
    energy_per_request_j: dict[str, float | None] = field(default_factory=dict)  # "host/device" -> joules per request

    def stolen_cpu(self) -> list[DeviceMetric]:
        """Each host's CPU steal (``cpu`` ``steal_pct``) where its hypervisor took ``STEAL_WARN_PCT`` or more of
        the CPU time while serving: every span timed then was stretched by pauses no code of its own caused."""
        return [m for m in self.metrics if m.device == "cpu" and m.metric == "steal_pct" and m.mean >= STEAL_WARN_PCT]


STEAL_WARN_PCT = 5.0
"""CPU steal (the serving seconds' mean) from which analysis warns and plans say their times hold it."""


@dataclass
class DeviceEnergy:
    """One device's measured energy split as ``measured_j = idle_j + sum(attributed_j) + unattributed_j``."""

    measured_j: float
    idle_w: float | None  # None: no second without work, and no spread of load to fit it from
    idle_from: str  # "seconds without work", "intercept of energy against busy time" or why unknown
    idle_j: float
    attributed_j: dict[str, float]  # stage -> active energy shared to it by its busy time on the device
    unattributed_j: float  # active energy in seconds no recorded span ran on the device
    source: str  # "energy counter" (NVML total energy, RAPL) or "power samples"
    seconds: int  # sampled seconds behind the figures
    sampling_interval_s: float


@dataclass
class Energy:
    """Energy per device, stage and request (1.7); see docs/metrics.md#energy."""

    devices: dict[str, DeviceEnergy] = field(default_factory=dict)  # "host/device" -> its split
    request_j: Bounds | None = None  # a request's energy: the sum over stages of their energy per request


@dataclass
class Roofs:
    """The roofline device's roofs: a compute roof per published precision and the memory roof (1.2)."""

    device: str
    name: str
    precision: str  # the precision stages were placed against
    peak_flops_per_s: dict[str, float | None]  # precision -> dense peak FLOP/s (OP/s for integers)
    memory_bandwidth_bytes_per_s: float


@dataclass
class DeviceSeries:
    host: str
    device: str
    metric: str
    values: list[float | None]  # per timeline bucket: mean of the per-second means, null where not sampled


@dataclass
class StageSeries:
    stage: str
    busy: list[float | None]  # per timeline bucket: Σ span time started in it ÷ its length = mean spans in progress


@dataclass
class Timeline:
    """Display series over time, down-sampled to shared buckets (1.2); never used for statistics."""

    start: int  # epoch seconds of the first bucket
    bucket_s: int
    buckets: int
    device_series: list[DeviceSeries] = field(default_factory=list)
    stage_series: list[StageSeries] = field(default_factory=list)


@dataclass
class Verdict:
    kind: str
    title: str
    score: float  # share of request time (or of the run) it concerns; verdicts are sorted by it
    evidence: dict
    advice: str


class SkippedFile(typing.TypedDict):
    path: str
    reason: str


class HostHardware(typing.TypedDict, total=False):
    cpu_model: str | None
    logical_cores: int | None
    memory_bytes: int | None
    gpus: list[str | None]


@dataclass
class DataQuality:
    files_read: int
    files_skipped: list[SkippedFile]
    rows: int
    rows_filtered: int
    null_durations: int
    negative_durations: int
    unjoined_children: int
    recorder: dict  # summed run.json counters: spans_dropped, write_errors, ...
    start: str | None
    end: str | None
    span_s: float
    hosts: list[str]
    services: list[str]
    processes: int
    clock_warnings: list[str]
    warnings: list[str]
    host_hardware: dict[str, HostHardware] = field(default_factory=dict)  # host -> what it is (1.3)
    counters_unknown: list[str] = field(default_factory=list)  # run dirs without final recorder counters (1.6)


@dataclass
class Portrait:
    version: str
    loadprobe_version: str
    generated_at: str
    inputs: list[str]
    roofline_device: str | None
    traffic: Traffic | None
    stages: list[Stage]  # by share of request time
    requests: Requests | None
    devices: Devices
    bottlenecks: list[Verdict]  # most important first
    data_quality: DataQuality
    roofline_roofs: Roofs | None = None  # (1.2)
    timeline: Timeline | None = None  # (1.2)
    energy: Energy | None = None  # (1.7)
    llm: Llm | None = None  # (1.9)

    def to_dict(self) -> dict:
        return _plain(self)

    def to_json(self) -> str:
        return _indented(self.to_dict()) + "\n"

    def save(self, path) -> Path:
        """Write portrait.json (via a temporary file, then a rename); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_file(path, self.to_json())

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    @classmethod
    def from_dict(cls, data: dict, where: str = "portrait") -> Portrait:
        """The portrait in ``data`` (portrait.json's content); a LoadprobeError naming ``where`` and the
        first field that is missing or of the wrong type, checked against the type hints below."""
        if not isinstance(data, dict):
            raise LoadprobeError(f"{where}: holds {_shown(data)}, not a loadprobe portrait (a JSON object); "
                                 "make one with 'loadprobe analyze'")
        PORTRAIT.check(data.get("version", ""), where)  # a LoadprobeError when newer or not a version
        try:
            return _build(cls, data, "")
        except _Wrong as exc:
            field_, why = exc.args
            raise LoadprobeError(f"{where}: {'field ' + field_ + ': ' if field_ else ''}{why}; the file is not a "
                                 "portrait loadprobe wrote: make it again with 'loadprobe analyze'") from None

    @classmethod
    def load(cls, path) -> Portrait:
        data = read_json(path, str(path), "run 'loadprobe analyze' to make one")
        return cls.from_dict(data, str(path))


def _plain(value):
    """``value`` as JSON-ready Python: dataclasses as dicts, tuples as lists, string keys, floats
    to _DIGITS significant digits (None where not finite). One walk over the tree, where
    ``dataclasses.asdict`` and then rounding took two (a 100M-span portrait has ~10^5 numbers)."""
    if isinstance(value, float):
        return float(f"{value:.{_DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _indented(value, depth: int = 0) -> str:
    """JSON with one key per line and each object of a list on its own lines, but lists of
    plain values (series, timelines, distributions) on one line each: readable, and mostly
    written by json's C encoder (``indent`` would use its Python one, ~4x slower)."""
    pad, inner = "\n" + "  " * depth, "\n" + "  " * (depth + 1)
    if isinstance(value, dict) and value:
        return "{" + ",".join(f"{inner}{json.dumps(k)}: {_indented(v, depth + 1)}" for k, v in value.items()) + pad + "}"
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return "[" + ",".join(f"{inner}{_indented(v, depth + 1)}" for v in value) + pad + "]"
    return json.dumps(value, allow_nan=False)


class _Wrong(Exception):
    """A value of portrait.json that is not what its field holds: (field path, what was expected)."""


def _build(cls, data, where: str):
    """Rebuild a dataclass tree from JSON, checking each value against its field's type hint."""
    if not isinstance(data, dict):
        raise _Wrong(where, f"expected an object, got {_shown(data)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}".lstrip("."))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _Wrong(where, f"missing {f.name!r}")
    built = cls(**kwargs)
    problem = built._problem() if hasattr(built, "_problem") else None  # rules across fields, where a class has any
    if problem:
        raise _Wrong(where, problem)
    return built


_EXPECTED = {str: "text", int: "a whole number (int64)", float: "a finite number", bool: "true or false"}


def _convert(hint, value, where: str):
    """``value`` as the type ``hint`` says (a dataclass, list[...], dict[str, ...], tuple[...],
    a TypedDict, a scalar, X | None), or _Wrong naming ``where``. Lists and dicts stay as read."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]  # every optional field has one other type
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            raise _Wrong(where, f"expected an object, got {_shown(value)}")
        for key, item_hint in typing.get_type_hints(hint).items():
            if key in value:
                _convert(item_hint, value[key], f"{where}.{key}")
        return value
    if (origin or hint) is list:
        if not isinstance(value, list):
            raise _Wrong(where, f"expected a list, got {_shown(value)}")
        return [_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)] if args else value
    if origin is tuple:
        if not isinstance(value, list) or len(value) != len(args):
            raise _Wrong(where, f"expected a list of {len(args)}, got {_shown(value)}")
        return [_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value))]
    if (origin or hint) is dict:
        if not isinstance(value, dict):
            raise _Wrong(where, f"expected an object, got {_shown(value)}")
        return {k: _convert(args[1], v, f"{where}.{k}") for k, v in value.items()} if args else value
    ok = (isinstance(value, hint) and not (isinstance(value, bool) and hint is not bool)) or \
        (hint is float and isinstance(value, int) and not isinstance(value, bool))
    if ok and hint in (int, float) and not isinstance(value, bool):
        ok = -2**63 <= value < 2**64 if isinstance(value, int) else math.isfinite(value)  # no overflow later
    if not ok:
        raise _Wrong(where, f"expected {_EXPECTED[hint]}, got {_shown(value)}")
    return value


def _shown(value) -> str:
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    return text if len(text) <= 40 else text[:30] + "..." + text[-6:]
