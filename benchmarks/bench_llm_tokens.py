"""Nanoseconds an LLM engine spends recording each generated token, against named peers in the same run.

    python benchmarks/bench_llm_tokens.py [--rounds 100] [--tokens 10000]

What the LLM sample (samples/llm/serve.py) records per token, inside the request: its ``(token)``
marker alone (``record_span(TOKEN, previous, now)``), and the marker with the batched ``decode``
step it was part of (batch, shape, engine, FLOPs and bytes). Peers: the *floor*, a list of
``(previous, now)`` tuples -- the least an engine can keep to know its inter-token gaps -- and
an OpenTelemetry SDK span event per token (``span.add_event``, the SDK's way to mark points in a
request). Rounds interleave the candidates so drift hits all alike; each figure is the median over
rounds of the time per token, less a bare loop's. The recorder runs with its buffers drained between
rounds (its flusher idles while a round is timed, as the floor's list is cleared between rounds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from time import perf_counter_ns

import loadprobe
from loadprobe import record_span, request
from loadprobe.schema import TOKEN


def bare(n: int) -> None:
    prev = perf_counter_ns()
    for _ in range(n):
        now = perf_counter_ns()
        prev = now


def floor(n: int, keep: list) -> None:
    prev = perf_counter_ns()
    for _ in range(n):
        now = perf_counter_ns()
        keep.append((prev, now))
        prev = now


def marker(n: int) -> None:
    prev = perf_counter_ns()
    for _ in range(n):
        now = perf_counter_ns()
        record_span(TOKEN, prev, now)
        prev = now


def marker_and_decode(n: int) -> None:
    prev = perf_counter_ns()
    for i in range(n):
        now = perf_counter_ns()
        record_span("decode", prev, now, batch=8, shape=(8,), engine="cpu", flops=2.9e7 if i % 8 == 0 else None,
                    bytes=1.4e7 if i % 8 == 0 else None)
        record_span(TOKEN, prev, now)
        prev = now


def otel_events(n: int, span) -> None:
    prev = perf_counter_ns()
    for _ in range(n):
        now = perf_counter_ns()
        span.add_event("token", timestamp=now)
        prev = now  # noqa: F841 - the same loop as the others


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=10_000)
    args = parser.parse_args()
    n = args.tokens

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    tracer = provider.get_tracer("bench")

    times: dict[str, list[float]] = {k: [] for k in ("bare", "floor", "marker", "marker + decode", "otel event")}
    with tempfile.TemporaryDirectory() as out:
        loadprobe.start(out, service="bench-llm", sample_devices=False, sample_interpreter=False,
                        max_buffered_spans=4 * n + 10)
        try:
            for _ in range(args.rounds):
                keep: list = []
                with request():
                    for name, run in (("bare", lambda: bare(n)), ("floor", lambda: floor(n, keep)),
                                      ("marker", lambda: marker(n)), ("marker + decode", lambda: marker_and_decode(n))):
                        t0 = perf_counter_ns()
                        run()
                        times[name].append((perf_counter_ns() - t0) / n)
                with tracer.start_as_current_span("request") as span:  # a fresh span: events do not pile up
                    t0 = perf_counter_ns()
                    otel_events(n, span)
                    times["otel event"].append((perf_counter_ns() - t0) / n)
                loadprobe.flush()
        finally:
            loadprobe.stop()
    provider.shutdown()
    base = statistics.median(times["bare"])
    added = {k: statistics.median(v) - base for k, v in times.items() if k != "bare"}
    result = {"tokens_per_round": n, "rounds": args.rounds, "bare_ns": round(base, 1),
              "added_ns_per_token": {k: round(v, 1) for k, v in added.items()},
              "vs_floor": {k: round(v / added["floor"], 2) for k, v in added.items()}}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
