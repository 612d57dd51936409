"""What a load run did: the ``LoadReport`` that ``loadprobe load`` prints (``render()``) or writes (``--json``).

Usage::

    report = loadprobe.load.run(url, offsets)
    print(report.render()); report.to_dict(); report.failure()   # None, or why no request succeeded
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..analysis.histogram import Histogram

__all__ = ["LoadReport", "load_report"]


@dataclass
class LoadReport:
    """What a load run did. ``render()`` is the text ``loadprobe load`` prints; ``to_dict()`` its ``--json``.

    Latencies count from each request's intended send time (closed loop: its actual send);
    lateness is actual send time minus intended time. Times in milliseconds.
    """

    url: str
    mode: str
    run_id: str
    seed: int | None
    scheduled: int | None  # None in closed loop: there is no schedule
    sent: int
    responses: int
    elapsed_s: float
    intended_rate: float | None  # requests per second
    achieved_rate: float | None
    lateness_ms: dict | None  # p50, p99, max; None in closed loop
    latency_ms: dict | None  # p50, p90, p99, p999, max of responses of any status
    errors: dict = field(default_factory=dict)  # kind ("http 503", "timeout", "connection reset") -> count
    statuses: dict = field(default_factory=dict)  # HTTP status -> responses
    body_bytes: int = 0
    record_dir: str | None = None
    interrupted: bool = False  # stopped by Ctrl-C (or SIGTERM): the figures are the requests that finished
    llm: dict | None = None  # --openai: time to first token, per output token, between chunks; tokens (llm_summary)

    def to_dict(self) -> dict:
        return asdict(self) | {"succeeded": self.succeeded}

    @property
    def succeeded(self) -> int:
        """Responses with a 2xx or 3xx status: the requests the server actually served."""
        return sum(n for code, n in self.statuses.items() if 200 <= int(code) < 400)

    def failure(self, max_failed: float = 0.0) -> str | None:
        """Why the run failed, or None: no request succeeded, or more than ``max_failed`` (a share)
        of those finished did not succeed (errors, timeouts, 4xx and 5xx answers)."""
        finished = self.responses + sum(n for kind, n in self.errors.items() if not kind.startswith("http "))
        failed = finished - self.succeeded
        if not finished or failed <= max_failed * finished:
            return None
        answers = ", ".join(f"{n:,} answered {code}" for code, n in sorted(self.statuses.items())
                            if not 200 <= code < 400)
        errors = ", ".join(f"{n:,} {kind}" for kind, n in sorted(self.errors.items(), key=lambda e: -e[1])
                           if not kind.startswith("http "))
        what = "; ".join(x for x in (answers, errors) if x)
        if not self.succeeded:
            return (f"no request of {finished:,} succeeded ({what}): check the URL, --method and the body the server "
                    "expects")
        return (f"{failed:,} of {finished:,} requests failed ({what}), more than --max-failed {max_failed:g} allows: "
                "the server did not carry this load; lower the rate or raise --timeout")

    def render(self) -> str:
        def ms(values: dict | None) -> str:
            return "  ".join(f"{k} {v:,.3f}" for k, v in values.items()) + " ms" if values else "none"

        def rate(value: float | None) -> str:
            return "n/a" if value is None else f"{value:,.1f} req/s"

        seed = f", seed {self.seed}" if self.seed is not None else ""
        lines = [f"loadprobe load: {self.mode} -> {self.url} (run {self.run_id}{seed}), {self.elapsed_s:,.2f} s"]
        if self.interrupted:
            lines.append("  interrupted: the figures below are the requests that finished before it")
        if self.scheduled is None:
            lines.append(f"  sent      {self.sent:,}, {rate(self.achieved_rate)} (closed loop)")
        else:
            lines.append(f"  sent      {self.sent:,} of {self.scheduled:,} scheduled, {rate(self.achieved_rate)} "
                         f"(intended {rate(self.intended_rate)})")
            lines.append(f"  lateness  {ms(self.lateness_ms)}   (actual - intended send time)")
        since = "intended send time" if self.scheduled is not None else "send time"
        lines.append(f"  latency   {ms(self.latency_ms)}   ({self.responses:,} responses, from {since})")
        statuses = ", ".join(f"{code}: {count:,}" for code, count in sorted(self.statuses.items()))
        lines.append(f"  statuses  {statuses or 'none'}")
        errors = ", ".join(f"{kind}: {count:,}" for kind, count in sorted(self.errors.items(), key=lambda e: -e[1]))
        lines.append(f"  errors    {errors or 'none'}")
        if self.llm:
            lines += _llm_lines(self.llm, ms)
        if self.record_dir:
            lines.append(f"  recorded  {self.record_dir} (loadprobe analyze {self.record_dir})")
        return "\n".join(lines)


def load_report(url, mode, run_id, seed, due_ns, results, start_ns, end_ns, record_dir, workload=None) -> LoadReport:
    """The report of a run from the client's results (its arrays of intended, sent and done times and statuses);
    with ``workload`` (``--openai``), its ``llm`` summary too."""
    intended, sent, done, status = (np.frombuffer(a, dtype=a.typecode == "i" and np.int32 or np.int64)
                                    for a in (results.intended, results.sent, results.done, results.status))
    written, answered = sent > 0, status > 0
    codes, counts = np.unique(status[answered], return_counts=True)
    return LoadReport(
        url=url, mode=mode, run_id=run_id, seed=seed,
        scheduled=None if due_ns is None else len(due_ns),
        sent=int(written.sum()),
        responses=int(answered.sum()),
        elapsed_s=(end_ns - start_ns) / 1e9,
        intended_rate=None if due_ns is None else _rate(due_ns),
        achieved_rate=_rate(sent[written]),
        lateness_ms=None if due_ns is None else _percentiles(sent[written] - intended[written],
                                                             {"p50": 50, "p99": 99, "max": None}),
        latency_ms=_percentiles(done[answered] - intended[answered],
                                {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9, "max": None}),
        errors=dict(results.errors),
        statuses={int(c): int(n) for c, n in zip(codes, counts)},
        body_bytes=results.body_bytes,
        record_dir=record_dir,
        llm=None if workload is None else llm_summary(results, intended, status, workload, (end_ns - start_ns) / 1e9),
    )


_SPREAD = {"p50": 50, "p90": 90, "p99": 99, "max": None}


def llm_summary(results, intended: np.ndarray, status: np.ndarray, workload, elapsed_s: float) -> dict:
    """Streamed answers, from the client's side: TTFT (first output chunk minus intended send time), TPOT
    ((last chunk - first chunk) / (output tokens - 1)), ITL (the gaps between a request's chunks), the
    server's token counts against those asked, and output tokens per second over the run."""
    at = np.frombuffer(results.chunk_at, dtype=np.int64)
    times = np.frombuffer(results.chunk_times, dtype=np.int64)
    tokens_in = np.frombuffer(results.tokens_in, dtype=np.int64)
    tokens_out = np.frombuffer(results.tokens_out, dtype=np.int64)
    ok = (status >= 200) & (status < 300) & (at[1:] > at[:-1])
    first, last = times[at[:-1][ok]], times[at[1:][ok] - 1]
    out = tokens_out[ok]
    decoding = out > 1
    gaps = np.diff(times)
    inside = np.ones(len(gaps), dtype=bool)
    inside[at[1:-1][(at[1:-1] > 0) & (at[1:-1] < len(times))] - 1] = False  # a gap across two requests is none
    asked_in, asked_out = workload.asked(len(status))
    served_in = tokens_in[ok][tokens_in[ok] >= 0]
    return {
        "requests": int(ok.sum()),
        "ttft_ms": _percentiles(first - intended[ok], _SPREAD),
        "tpot_ms": _percentiles((last - first)[decoding] // (out[decoding] - 1), _SPREAD),
        "itl_ms": _percentiles(gaps[inside], _SPREAD),
        "prompt_tokens": {"asked_mean": asked_in, "mean": float(served_in.mean()) if len(served_in) else None},
        "output_tokens": {"asked_mean": asked_out, "mean": float(out.mean()) if len(out) else None},
        "output_tokens_per_s": float(out.sum()) / elapsed_s if elapsed_s > 0 else None,
        "usage_reported": bool(workload.usage_reported),
        "model": workload.model,
    }


def _llm_lines(llm: dict, ms) -> list[str]:
    def mean(value) -> str:
        return "n/a" if value is None else f"{value:,.1f}"

    p, o = llm["prompt_tokens"], llm["output_tokens"]
    rate = llm["output_tokens_per_s"]
    lines = [f"  TTFT      {ms(llm['ttft_ms'])}   (first output chunk, from intended send time)",
             f"  TPOT      {ms(llm['tpot_ms'])}   (per output token after the first)",
             f"  ITL       {ms(llm['itl_ms'])}   (between output chunks)",
             f"  tokens    prompt mean {mean(p['mean'])} (asked {p['asked_mean']:,.1f}), output mean {mean(o['mean'])} "
             f"(asked {o['asked_mean']:,.1f}); {mean(rate)} output tokens/s; model {llm['model']}"]
    if not llm["usage_reported"]:
        lines.append("            the server reports no token usage: prompts were sized in words, outputs counted "
                     "in chunks")
    return lines


def _percentiles(values_ns: np.ndarray, which: dict) -> dict | None:
    """Milliseconds at each percentile (None: the maximum), to HdrHistogram's 0.1% as analysis reports them."""
    if len(values_ns) == 0:
        return None
    hist = Histogram()
    hist.record(np.maximum(values_ns, 0))
    found = hist.percentiles(tuple(p for p in which.values() if p is not None))
    return {name: (hist.max if p is None else found[p]) / 1e6 for name, p in which.items()}


def _rate(times_ns: np.ndarray) -> float | None:
    """Requests per second between the first and the last of ``times_ns``."""
    if len(times_ns) < 2:
        return None
    span = int(times_ns.max()) - int(times_ns.min())
    return (len(times_ns) - 1) * 1e9 / span if span > 0 else None
