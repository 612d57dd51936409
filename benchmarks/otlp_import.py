"""How fast and in how much memory does ``loadprobe import`` read OpenTelemetry trace files? Against pandas.

    python benchmarks/otlp_import.py [--spans 300000] [--json]

Writes a trace of ``--spans`` spans made by the OpenTelemetry SDK (requests of five spans: a server
span, three stages, one nested), encoded by the SDK's own OTLP encoders in messages of 512 spans
(the batch span processor's default) as the Collector's file exporter lays them out: OTLP/JSON lines
and length-prefixed OTLP protobuf. Then, each in a process of its own (wall time and peak RSS from
the kernel's accounting of that process):

- ``loadprobe import`` of each file: requests, stages, parents and attributes written as Parquet;
- the peer, what a notebook would do with the JSON file: ``json.loads`` per line and
  ``pandas.json_normalize`` down to one row per span (no requests, no stages: a flat table only);
- the peer for protobuf: the OpenTelemetry protobuf classes' decoding, ``MessageToDict`` and
  ``pandas.json_normalize``.

Prints spans per second and peak memory of each, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MESSAGE_SPANS = 512

PANDAS_JSON = r'''
import json, sys
import pandas as pd
frames = []
with open(sys.argv[1]) as f:
    for line in f:
        message = json.loads(line)
        frames.append(pd.json_normalize(message["resourceSpans"], record_path=["scopeSpans", "spans"]))
table = pd.concat(frames, ignore_index=True)
print(len(table))
'''

PANDAS_PROTO = r'''
import sys
import pandas as pd
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
frames = []
with open(sys.argv[1], "rb") as f:
    while prefix := f.read(4):
        message = ExportTraceServiceRequest.FromString(f.read(int.from_bytes(prefix, "big")))
        frames.append(pd.json_normalize(MessageToDict(message)["resourceSpans"], record_path=["scopeSpans", "spans"]))
table = pd.concat(frames, ignore_index=True)
print(len(table))
'''


def write_trace(folder: Path, spans: int) -> tuple[Path, Path]:
    from opentelemetry import trace as api
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "api", "host.name": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    json_path, proto_path = folder / "traces.jsonl", folder / "traces.pb"
    with open(json_path, "w") as json_file, open(proto_path, "wb") as proto_file:
        for i in range(spans // 5):
            with tracer.start_as_current_span("POST /v1/embed", kind=api.SpanKind.SERVER):
                with tracer.start_as_current_span("tokenize", attributes={"gen_ai.usage.input_tokens": 10 + i % 50}):
                    pass
                with tracer.start_as_current_span("model", attributes={"loadprobe.batch": 1 + i % 8,
                                                                       "loadprobe.engine": "gpu0"}):
                    with tracer.start_as_current_span("kernel"):
                        pass
                with tracer.start_as_current_span("reply"):
                    pass
            finished = exporter.get_finished_spans()
            if len(finished) >= MESSAGE_SPANS or i == spans // 5 - 1:
                exporter.clear()
                for k in range(0, len(finished), MESSAGE_SPANS):
                    part = finished[k:k + MESSAGE_SPANS]
                    json_file.write(encode_json(part).to_json() + "\n")
                    data = encode_proto(part).SerializeToString()
                    proto_file.write(len(data).to_bytes(4, "big") + data)
    return json_path, proto_path


def measure(command: list[str]) -> dict:
    """Wall seconds and peak RSS (MiB) of ``command`` run as a process of its own."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    out, err = process.stdout.read().decode(), process.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command[:4]} failed: {err[-2000:]}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime,
            "out": out.strip().splitlines()[-1:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=300_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        json_path, proto_path = write_trace(folder, args.spans)
        spans = args.spans // 5 * 5
        runs = {
            "loadprobe import (OTLP/JSON)": measure([sys.executable, "-m", "loadprobe", "import", str(json_path), "-o",
                                                     str(folder / "a")]),
            "pandas.json_normalize (OTLP/JSON)": measure([sys.executable, "-c", PANDAS_JSON, str(json_path)]),
            "loadprobe import (OTLP protobuf)": measure([sys.executable, "-m", "loadprobe", "import", str(proto_path),
                                                         "-o", str(folder / "b")]),
            "protobuf + MessageToDict + pandas (OTLP protobuf)": measure([sys.executable, "-c", PANDAS_PROTO,
                                                                          str(proto_path)]),
        }
        sizes = {"json_mib": json_path.stat().st_size / 2**20, "proto_mib": proto_path.stat().st_size / 2**20}
    result = {"spans": spans, **sizes,
              "runs": {name: {**run, "spans_per_s": spans / run["wall_s"]} for name, run in runs.items()}}
    names = list(runs)
    result["json_speedup"] = runs[names[1]]["wall_s"] / runs[names[0]]["wall_s"]
    result["json_memory_ratio"] = runs[names[1]]["peak_rss_mib"] / runs[names[0]]["peak_rss_mib"]
    result["proto_speedup"] = runs[names[3]]["wall_s"] / runs[names[2]]["wall_s"]
    result["proto_memory_ratio"] = runs[names[3]]["peak_rss_mib"] / runs[names[2]]["peak_rss_mib"]
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{spans:,} spans; OTLP/JSON {sizes['json_mib']:.0f} MiB, protobuf {sizes['proto_mib']:.0f} MiB")
    for name, run in result["runs"].items():
        print(f"  {name:52s} {run['wall_s']:6.1f} s  {run['spans_per_s']:>9,.0f} spans/s  "
              f"peak {run['peak_rss_mib']:6.0f} MiB")
    print(f"loadprobe vs the peer: JSON {result['json_speedup']:.2f}x the speed, {result['json_memory_ratio']:.2f}x less "
          f"memory; protobuf {result['proto_speedup']:.2f}x, {result['proto_memory_ratio']:.2f}x less memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
