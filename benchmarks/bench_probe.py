"""Nanoseconds a probe adds to one call, against named peers measured in the same run.

    python benchmarks/bench_probe.py [--rounds 200] [--calls 20000]

Peers: a bare call; the floor (a decorator doing two perf_counter_ns() reads and one
list append); an OpenTelemetry SDK span with a BatchSpanProcessor; prometheus_client's
Histogram (its ``time()`` decorator, i.e. one observe per call); hdrhistogram's
record_value. Rounds interleave the candidates so drift hits all alike; each figure is
the median over rounds of the per-call time, minus the bare call's median. The recorder
runs twice: "hot path" drains the buffers between rounds (the flusher idles while a round
is timed, as the floor's list is cleared between rounds), and "with flusher" lets the
flusher convert and write in the background while rounds run, as in a service.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from time import perf_counter_ns

import loadprobe
from loadprobe import probe, request


def work(x):
    return x


def floor_decorator(fn):
    buf = []

    def wrapper(*args, **kwargs):
        t0 = perf_counter_ns()
        result = fn(*args, **kwargs)
        buf.append((t0, perf_counter_ns()))
        return result

    wrapper.buffer = buf
    return wrapper


def otel_wrapped():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=1 << 16))
    tracer = provider.get_tracer("bench")

    def wrapper(x):
        with tracer.start_as_current_span("stage"):
            return work(x)

    return wrapper, provider


def prometheus_wrapped():
    from prometheus_client import CollectorRegistry, Histogram

    histogram = Histogram("stage_seconds", "stage latency", registry=CollectorRegistry())
    return histogram.time()(work)


def hdr_wrapped():
    from hdrh.histogram import HdrHistogram

    histogram = HdrHistogram(1, 60_000_000_000, 3)

    def wrapper(*args, **kwargs):
        t0 = perf_counter_ns()
        result = work(*args, **kwargs)
        histogram.record_value(perf_counter_ns() - t0)
        return result

    return wrapper


def with_probe(x):
    with probe("stage"):
        return work(x)


def measure(candidates: dict, rounds: int, calls: int, drain) -> dict[str, float]:
    samples = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            drain()
            t0 = perf_counter_ns()
            for i in range(calls):
                fn(i)
            samples[name].append((perf_counter_ns() - t0) / calls)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    floor = floor_decorator(work)
    otel, provider = otel_wrapped()
    with tempfile.TemporaryDirectory() as out:
        # A large cap, so the figure is the cost of recording, never of dropping.
        recorder = loadprobe.start(out, sample_devices=False, max_buffered_spans=1 << 22, flush_interval_s=3600)
        candidates = {
            "bare": work,
            "floor": floor,
            "probe": probe("stage")(work),
            "with_probe": with_probe,
            "otel_span": otel,
            "prometheus_observe": prometheus_wrapped(),
            "hdrhistogram_record": hdr_wrapped(),
        }
        def drain_between_rounds():
            # Every candidate starts its round with empty buffers, idle background threads
            # (ours and OpenTelemetry's exporter) and a fresh garbage collector.
            floor.buffer.clear()
            loadprobe.flush()
            provider.force_flush()
            gc.collect()

        with request():  # "inside a request": the probes attach to it, as in a service
            per_call = measure(candidates, args.rounds, args.calls, drain_between_rounds)
            recorder.flush_interval_s = 0.2
            live = measure({k: candidates[k] for k in ("bare", "floor", "probe")}, args.rounds, args.calls,
                           floor.buffer.clear)
        stats = loadprobe.stop()
    provider.shutdown()
    added = {name: ns - per_call["bare"] for name, ns in per_call.items() if name != "bare"}
    live_added = {name: ns - live["bare"] for name, ns in live.items() if name != "bare"}
    result = {
        "python": sys.version.split()[0],
        "bare_call_ns": round(per_call["bare"], 1),
        "added_ns": {k: round(v, 1) for k, v in added.items()},
        "probe_over_floor": round(added["probe"] / added["floor"], 2),
        "with_probe_over_floor": round(added["with_probe"] / added["floor"], 2),
        "otel_over_probe": round(added["otel_span"] / added["probe"], 1),
        "prometheus_over_probe": round(added["prometheus_observe"] / added["probe"], 2),
        "hdrhistogram_over_probe": round(added["hdrhistogram_record"] / added["probe"], 2),
        "with_flusher_added_ns": {k: round(v, 1) for k, v in live_added.items()},
        "with_flusher_probe_over_floor": round(live_added["probe"] / live_added["floor"], 2),
        "spans_written": stats.spans_written,
        "spans_dropped": stats.spans_dropped,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"bare call: {result['bare_call_ns']} ns   (median of {args.rounds} rounds x {args.calls:,} calls)")
    for name, ns in result["added_ns"].items():
        print(f"  {name:<22} +{ns:8.1f} ns   {ns / added['floor']:6.2f}x floor")
    print(f"@probe / floor = {result['probe_over_floor']}   OTel span / @probe = {result['otel_over_probe']}")
    print(f"with the flusher writing meanwhile: floor +{live_added['floor']:.1f} ns, @probe +{live_added['probe']:.1f} ns"
          f" = {result['with_flusher_probe_over_floor']}x floor")
    print(f"spans written {stats.spans_written:,}, dropped {stats.spans_dropped:,}")


if __name__ == "__main__":
    time.sleep(0.1)
    main()
