"""LLM serving as its users measure it: the portrait's ``llm`` section, from request spans and token markers.

An LLM request is a root span that carries ``tokens_out`` (``loadprobe load --openai``, an engine's
request span, an imported or received GenAI span). Under it, ``schema.FIRST_TOKEN`` ends at the
first output token and each ``schema.TOKEN`` marker ends at a later piece of output, its duration
the gap since the one before (``schema.LAST_TOKEN``, where the decode was timed as a whole, ends at
the last). Whoever recorded them, one rule reads them:

- TTFT = first token - request start; TPOT = (last output - first token) / (tokens_out - 1), the
  last output being the latest ``TOKEN`` or ``LAST_TOKEN`` end (the request's end where neither was
  recorded);
  ITL = each ``TOKEN`` marker's duration; E2E = the request span's duration;
- tokens per second: each request's first token at its time, the rest spread evenly to its last
  output; prompt tokens at the first token (the prompt is read by then);
- goodput: requests that succeeded within both targets (TTFT, and TPOT where a request has more
  than one token), as a share of the LLM requests and per second of the window.

A request's spans may lie in different files (a long answer outlives a segment), so the map step
keeps what each file holds -- a few integers per request, the ITL histogram, per request -- and
the finalize step joins them by run and span id. Markers are timing, not work: the map step
leaves them out of the stages (``map_step.map_spans``).

Usage::

    map_llm(part.llm, cols, view="client", run_id=ref.run_id)     # per file, in the map step
    portrait.llm = build_llm(part.llm, ttft_ms=500, tpot_ms=50)   # after the merge
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .columns import SpanColumns, arrow_rows, sparse_filled
from .engine_load import build_engine
from .histogram import Histogram, latency_cdf
from .pairing import client_keys, pair_ids
from .timeline import in_buckets, points_per_second, spread_per_second
from ..portrait import Goodput, Llm, LlmLatency, TokenCounts, TokenRate, TokenSeries, TtftSplit
from ..schema import FIRST_TOKEN, LAST_TOKEN, MARKERS, TOKEN

PHASES = ("queue", "prefill")  # the spans a request's time to first token splits into, where the engine records them
ITERATION = "decode"  # an engine's decode pass, where it records one span per sequence (its ``batch``: sequences)
VIEWS = ("client", "service")  # the load client's requests, or the service's own (engine probes, OpenTelemetry)
DERIVED_TARGET_X_MEDIAN = 2.0  # targets not given: twice the recorded median TTFT and TPOT
_NS_PER_MS = 1e6


@dataclass
class LlmPartial:
    """What the map step keeps of LLM requests, per (view, run): arrays per file, joined at the end."""

    roots: dict = field(default_factory=dict)  # (view, run) -> [(6, n) int64: span id, start, dur, in, out, ok]
    ids: dict = field(default_factory=dict)  # (view, run) -> [request ids of those roots (None: not read)]
    firsts: dict = field(default_factory=dict)  # (view, run) -> [(2, n): parent, first token time]
    outputs: dict = field(default_factory=dict)  # (view, run) -> [(3, n): parent, last output time, markers]
    phases: dict = field(default_factory=dict)  # (view, run) -> [(3, n): parent, queued ns, prefill ns]
    passes: dict = field(default_factory=dict)  # (view, run) -> [(3, n): start, duration, batch of ITERATION spans]
    itl: dict = field(default_factory=dict)  # view -> Histogram of TOKEN marker durations (ns)

    def merge(self, o: LlmPartial) -> LlmPartial:
        for mine, theirs in ((self.roots, o.roots), (self.ids, o.ids), (self.firsts, o.firsts),
                             (self.outputs, o.outputs), (self.phases, o.phases), (self.passes, o.passes)):
            for key, arrays in theirs.items():
                mine.setdefault(key, []).extend(arrays)
        for view, hist in o.itl.items():
            self.itl.setdefault(view, Histogram()).merge(hist)
        return self


def marker_rows(cols: SpanColumns) -> np.ndarray | None:
    """Which rows are token markers (None: the file has none, the usual case)."""
    codes = [i for i, name in enumerate(cols.stage_names) if name in MARKERS]
    return np.isin(cols.stage, codes) if codes else None


def map_llm(llm: LlmPartial, cols: SpanColumns, markers: np.ndarray | None, view: str, run_id: str,
            request_ids=None) -> None:
    """Add one file's LLM request spans, their phases and token markers to ``llm`` (copies: ``cols`` may be
    scratch). ``request_ids``: the table's request id column, where it was read (views pair by it)."""
    n = len(cols.ts)
    tokens_out = sparse_filled(cols.tokens_out, n, -1)
    roots = (cols.parent == 0) & (tokens_out >= 0)
    key = (view, run_id)
    if roots.any():
        ok_code = cols.status_names.index("ok") if "ok" in cols.status_names else -2
        llm.roots.setdefault(key, []).append(np.stack([
            cols.span_id[roots], cols.ts[roots], cols.dur[roots],
            sparse_filled(cols.tokens_in, n, -1)[roots], tokens_out[roots],
            (cols.status[roots] == ok_code).astype(np.int64)]))
        llm.ids.setdefault(key, []).append(None if request_ids is None else
                                           request_ids.take(arrow_rows(np.flatnonzero(roots))).to_pylist())
    if markers is None and not roots.any():
        return  # a file with no LLM request span nor marker: its "queue" or "prefill" spans are kept for none
    names = cols.stage_names
    for stage in PHASES:
        code = names.index(stage) if stage in names else -2
        rows = (cols.stage == code) & (cols.parent != 0) & cols.valid
        if rows.any():
            queued = np.maximum(sparse_filled(cols.queue, n, 0)[rows], 0)
            spans = (queued + cols.dur[rows], np.zeros(int(rows.sum()), np.int64)) if stage == "queue" else (
                queued, cols.dur[rows])
            llm.phases.setdefault(key, []).append(np.stack([cols.parent[rows], *spans]))
    code = names.index(ITERATION) if ITERATION in names else -2
    batch = sparse_filled(cols.batch, n, -1)
    rows = (cols.stage == code) & (cols.parent != 0) & cols.valid & (batch >= 1)
    if rows.any():  # each sequence's span of a batched pass: the same pass, kept once when joined
        llm.passes.setdefault(key, []).append(np.stack([cols.ts[rows], cols.dur[rows], batch[rows]]))
    if markers is None:
        return
    ends = cols.ts + cols.dur
    names = cols.stage_names
    first = markers & (cols.stage == (names.index(FIRST_TOKEN) if FIRST_TOKEN in names else -2))
    if first.any():
        llm.firsts.setdefault(key, []).append(np.stack([cols.parent[first], ends[first]]))
    gaps = markers & (cols.stage == (names.index(TOKEN) if TOKEN in names else -2)) & cols.valid
    later = gaps | (markers & (cols.stage == (names.index(LAST_TOKEN) if LAST_TOKEN in names else -2)))
    if gaps.any():
        llm.itl.setdefault(view, Histogram()).record(cols.dur[gaps])
    if later.any():
        parents, inverse = np.unique(cols.parent[later], return_inverse=True)
        last = np.full(len(parents), np.iinfo(np.int64).min)
        np.maximum.at(last, inverse, ends[later])
        llm.outputs.setdefault(key, []).append(np.stack([parents, last, np.bincount(inverse, weights=gaps[later])
                                                        .astype(np.int64)]))


@dataclass
class LlmRequests:
    """Every LLM request of a view, joined: one entry per request span (times in ns)."""

    start: np.ndarray
    dur: np.ndarray
    tokens_in: np.ndarray  # -1: unknown
    tokens_out: np.ndarray
    ok: np.ndarray  # bool
    first: np.ndarray  # first token time, -1: none recorded
    last: np.ndarray  # last output time: the last marker's end, else the request's end
    queued: np.ndarray  # before its first token: waiting to be scheduled (ns; -1: no phase recorded)
    prefill: np.ndarray
    ids: list | None  # request ids, where every file's were read
    passes: np.ndarray | None = None  # (3, m): the engine's decode passes, where it timed them: start, duration, batch

    @property
    def with_first(self) -> np.ndarray:
        return self.first >= 0

    @property
    def decoding(self) -> np.ndarray:
        """Requests with a TPOT: a first token and more than one output token."""
        return self.with_first & (self.tokens_out >= 2)

    def ttft_ns(self) -> np.ndarray:
        return (self.first - self.start)[self.with_first]

    def tpot_ns(self) -> np.ndarray:
        d = self.decoding
        return (self.last[d] - self.first[d]) / (self.tokens_out[d] - 1)


def build_llm(llm: LlmPartial, ttft_ms: float | None = None, tpot_ms: float | None = None,
              samples: dict | None = None) -> Llm | None:
    """The ``llm`` section (None without LLM requests): from the load client's view when it recorded LLM
    requests, else the service's. ``ttft_ms``/``tpot_ms``: the goodput targets (derived when not given);
    ``samples``: the merged device samples, where a scraped engine's gauges are (``engine_load``)."""
    views = recorded_requests(llm)
    if views is None:
        return None
    view, requests = views["shown"]
    itl = llm.itl.get(view)
    return llm_section(requests, view, itl if itl is not None and itl.total else None, ttft_ms, tpot_ms,
                       split=_ttft_split(views["service"], views["client"]),
                       engine_requests=views["service"], samples=samples)


def recorded_requests(llm: LlmPartial) -> dict | None:
    """Every LLM request of each view, joined (None without any): ``{"client": LlmRequests | None, "service":
    ..., "shown": (view, its requests)}`` -- the view shown is the client's when it recorded first tokens."""
    joined = {view: _joined(llm, view) for view in VIEWS}
    found = [view for view in VIEWS if joined[view] is not None]
    if not found:
        return None
    view = next((v for v in found if joined[v].with_first.any()), found[0])
    return {**joined, "shown": (view, joined[view])}


def llm_section(requests: LlmRequests, source: str, itl: Histogram | None, ttft_ms: float | None,
                tpot_ms: float | None, split: TtftSplit | None = None, engine_requests: LlmRequests | None = None,
                samples: dict | None = None) -> Llm:
    """The ``llm`` section of ``requests`` (recorded or simulated: one rule for both); ``itl``: the gaps
    between pieces of output (ns), where they were timed; ``engine_requests``: the engine's own, for its load."""
    ttft, tpot = requests.ttft_ns(), requests.tpot_ns()
    since_ns, until_ns = int(requests.start.min()), int((requests.start + requests.dur).max())
    window_ns = until_ns - since_ns
    output, prompt = _per_second(requests, window_ns)
    return Llm(
        source=source,
        requests=len(requests.start),
        ttft_ms=_latency(ttft),
        itl_ms=_from_histogram(itl) if itl is not None else None,
        tpot_ms=_latency(tpot),
        e2e_ms=_latency(requests.dur[requests.ok]),
        tokens_in=_counts(requests.tokens_in),
        tokens_out=_counts(requests.tokens_out),
        output_tokens_per_s=_rate(requests.tokens_out, output, window_ns),
        input_tokens_per_s=_rate(requests.tokens_in, prompt, window_ns),
        goodput=_goodput(requests, ttft_ms, tpot_ms, window_ns),
        ttft_cdf=_cdf(ttft),
        tpot_cdf=_cdf(tpot),
        itl_cdf=latency_cdf(itl) if itl is not None else None,
        tokens_series=_series(since_ns, output, prompt),
        lengths=_lengths(requests.tokens_in, requests.tokens_out),
        ttft_split_ms=split,
        engine=build_engine(samples or {}, engine_requests, since_ns, until_ns),
    )


def _joined(llm: LlmPartial, view: str) -> LlmRequests | None:
    parts, ids, passes = [], [], []
    for (v, run), arrays in llm.roots.items():
        if v != view:
            continue
        roots = np.concatenate(arrays, axis=1)
        order = np.argsort(roots[0], kind="stable")
        roots = roots[:, order]
        first = _lookup(roots[0], llm.firsts.get((v, run)), np.minimum)
        last = _lookup(roots[0], llm.outputs.get((v, run)), np.maximum)
        last = np.where(last >= 0, last, roots[1] + roots[2])
        queued = _lookup(roots[0], llm.phases.get((v, run)), np.add)
        prefill = _lookup(roots[0], llm.phases.get((v, run)), np.add, row=2)
        parts.append(np.vstack([roots[1:], first[None], last[None], queued[None], prefill[None]]))
        if llm.passes.get((v, run)):
            passes.append(np.unique(np.concatenate(llm.passes[(v, run)], axis=1), axis=1))
        chunks = llm.ids.get((v, run)) or [None]
        if ids is not None and all(chunk is not None for chunk in chunks):
            flat = [i for chunk in chunks for i in chunk]
            ids += [flat[k] for k in order.tolist()]
        else:
            ids = None  # some file's ids were not read: the views cannot be paired
    if not parts:
        return None
    start, dur, tokens_in, tokens_out, ok, first, last, queued, prefill = np.concatenate(parts, axis=1)
    return LlmRequests(start, dur, tokens_in, tokens_out, ok.astype(bool), first, last, queued, prefill, ids,
                       np.concatenate(passes, axis=1) if passes else None)


_START = {np.minimum: np.iinfo(np.int64).max, np.maximum: np.iinfo(np.int64).min, np.add: 0}


def _lookup(span_ids: np.ndarray, arrays: list | None, reduce, row: int = 1) -> np.ndarray:
    """For each sorted request span id, ``row`` of the ``arrays`` (row 0: the parent span id) reduced over
    the rows under it, whichever files hold them; -1 where none does."""
    out = np.full(len(span_ids), -1, dtype=np.int64)
    if not arrays:
        return out
    marks = np.concatenate(arrays, axis=1)
    at = np.searchsorted(span_ids, marks[0])
    found = at < len(span_ids)
    found[found] = span_ids[at[found]] == marks[0][found]
    value = np.full(len(span_ids), _START[reduce], dtype=np.int64)
    reduce.at(value, at[found], marks[row][found])
    seen = np.zeros(len(span_ids), dtype=bool)
    seen[at[found]] = True
    out[seen] = value[seen]
    return out


def _ttft_split(service: LlmRequests | None, client: LlmRequests | None) -> TtftSplit | None:
    """The engine's TTFT split into queue, prefill and the rest; with the load client's requests of the
    same run, how much longer the client waited for the same first tokens (paired by request id, or the
    trace id the client sent). When
    they pair, the split covers the paired requests only, so that the client's mean TTFT over them is
    queue + prefill + rest + outside."""
    if service is None:
        return None
    timed = service.with_first & ((service.queued >= 0) | (service.prefill >= 0))
    paired, outside = 0, None
    if client is not None and client.ids is not None and service.ids is not None:
        where = pair_ids(client_keys(client.ids), service.ids)
        both = timed & (where >= 0)
        both[both] = client.with_first[where[both]]
        if both.any():
            timed = both
            gaps = (client.first - client.start)[where[both]] - (service.first - service.start)[both]
            paired, outside = int(both.sum()), float(np.mean(gaps)) / _NS_PER_MS
    if not timed.any():
        return None
    ttft = (service.first - service.start)[timed]
    queued, prefill = np.maximum(service.queued[timed], 0), np.maximum(service.prefill[timed], 0)
    return TtftSplit(requests=int(timed.sum()), queue_ms=float(queued.mean()) / _NS_PER_MS,
                     prefill_ms=float(prefill.mean()) / _NS_PER_MS,
                     rest_ms=float(np.maximum(ttft - queued - prefill, 0).mean()) / _NS_PER_MS, paired=paired,
                     outside_ms=outside)


def _latency(values_ns: np.ndarray) -> LlmLatency | None:
    if len(values_ns) == 0:
        return None
    ms = np.asarray(values_ns, dtype=np.float64) / _NS_PER_MS
    p50, p90, p95, p99 = np.percentile(ms, (50, 90, 95, 99))
    return LlmLatency(mean=float(ms.mean()), p50=float(p50), p90=float(p90), p95=float(p95), p99=float(p99),
                      count=len(ms))


def _from_histogram(hist: Histogram) -> LlmLatency:
    p = hist.percentiles((50, 90, 95, 99))
    return LlmLatency(mean=hist.mean / _NS_PER_MS, p50=p[50] / _NS_PER_MS, p90=p[90] / _NS_PER_MS,
                      p95=p[95] / _NS_PER_MS, p99=p[99] / _NS_PER_MS, count=hist.total)


def _counts(values: np.ndarray) -> TokenCounts | None:
    known = values[values >= 0]
    if len(known) == 0:
        return None
    p50, p99 = np.percentile(known, (50, 99))
    return TokenCounts(mean=float(known.mean()), p50=float(p50), p99=float(p99), max=int(known.max()),
                       total=int(known.sum()))


def _per_second(r: LlmRequests, window_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Output and prompt tokens in each second from the first request's start.

    Output: a request's first token at its time, the rest spread evenly up to its last output (all
    of them over the request, where no first token was recorded). Prompt: at the first token (the
    prompt is read by then; at the request's start where no first token was recorded)."""
    seconds = max(1, int(np.ceil(window_ns / 1e9)))
    origin = int(r.start.min())
    known, f = r.tokens_out >= 0, r.with_first & (r.tokens_out >= 0)
    spread_from = np.where(f, r.first, r.start)[known]
    spread_to = np.where(f, r.last, r.start + r.dur)[known]
    spread = np.where(f, r.tokens_out - 1, r.tokens_out)[known].astype(np.float64)
    output = spread_per_second(spread_from - origin, np.maximum(spread_to, spread_from) - origin, spread, seconds)
    output += points_per_second(r.first[f] - origin, np.ones(int(f.sum())), seconds)
    read = r.tokens_in >= 0
    prompt = points_per_second(np.where(r.with_first, r.first, r.start)[read] - origin,
                               r.tokens_in[read].astype(np.float64), seconds)
    return output, prompt


def _rate(tokens: np.ndarray, per_second: np.ndarray, window_ns: int) -> TokenRate | None:
    known = tokens >= 0
    if not known.any() or window_ns <= 0:
        return None
    return TokenRate(mean=float(tokens[known].sum()) * 1e9 / window_ns, peak=float(per_second.max()))


def _series(origin_ns: int, output: np.ndarray, prompt: np.ndarray) -> TokenSeries:
    """Tokens per second over time, in buckets few enough to draw."""
    start, step, (out, read) = in_buckets(origin_ns, [output, prompt])
    return TokenSeries(start=start, bucket_s=step, output_per_s=out, input_per_s=read)


def _cdf(values_ns: np.ndarray) -> list | None:
    """The display CDF of per-request times, as the other latencies' (to HdrHistogram's 0.1%)."""
    if len(values_ns) == 0:
        return None
    hist = Histogram()
    hist.record(np.maximum(np.round(values_ns), 0).astype(np.int64))
    return latency_cdf(hist)


def _lengths(tokens_in: np.ndarray, tokens_out: np.ndarray) -> list | None:
    """Requests by prompt and output length, in power-of-two bins: [[prompt from, output from, requests], ...]."""
    known = (tokens_in >= 0) & (tokens_out >= 0)
    if not known.any():
        return None
    low = [np.where(x[known] > 0, 2 ** np.floor(np.log2(np.maximum(x[known], 1))), 0).astype(np.int64)
           for x in (tokens_in, tokens_out)]
    pairs, counts = np.unique(np.stack(low, axis=1), axis=0, return_counts=True)
    return [[int(a), int(b), int(n)] for (a, b), n in zip(pairs, counts)]


def _goodput(r: LlmRequests, ttft_ms: float | None, tpot_ms: float | None, window_ns: int) -> Goodput | None:
    """Requests that succeeded within both targets; the targets not given are twice the recorded medians."""
    ttft, tpot = r.ttft_ns() / _NS_PER_MS, r.tpot_ns() / _NS_PER_MS
    if len(ttft) == 0:
        return None
    derived = [name for name, given in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)) if given is None]
    if ttft_ms is None:
        ttft_ms = float(np.median(ttft)) * DERIVED_TARGET_X_MEDIAN
    if tpot_ms is None and len(tpot):
        tpot_ms = float(np.median(tpot)) * DERIVED_TARGET_X_MEDIAN
    elif tpot_ms is None:
        derived.remove("tpot_ms")  # no request had a second token: there is no TPOT to hold to
    first_ms = np.full(len(r.start), np.inf)
    first_ms[r.with_first] = ttft
    per_token_ms = np.zeros(len(r.start))
    per_token_ms[r.decoding] = tpot
    within_tpot = (per_token_ms <= tpot_ms) if tpot_ms is not None else np.ones(len(r.start), dtype=bool)
    good = r.ok & (first_ms <= ttft_ms) & within_tpot
    count = int(good.sum())
    return Goodput(ttft_ms=ttft_ms, tpot_ms=tpot_ms, derived=derived, requests=count,
                   share=count / len(r.start), rps=count * 1e9 / window_ns if window_ns > 0 else None,
                   by_ttft=_curve(first_ms, r.ok & within_tpot, ttft, ttft_ms),
                   by_tpot=_curve(per_token_ms, r.ok & (first_ms <= ttft_ms), tpot, tpot_ms) if len(tpot) else [])


def _curve(values_ms: np.ndarray, others_hold: np.ndarray, recorded: np.ndarray, target: float) -> list:
    """The goodput share at targets from the recorded values' range (and the one held to), the other
    target kept: [[target ms, share], ...], at most about 100 points."""
    targets = np.unique(np.concatenate([np.quantile(recorded, np.linspace(0, 1, 99)), [target]]))
    good = [(float(t), float(np.mean(others_hold & (values_ms <= t)))) for t in targets]
    return [[round(t, 6), round(share, 6)] for t, share in good]
