"""The live OTLP/HTTP receiver: the real OpenTelemetry SDK's OTLP/HTTP exporter sends to it (in this
process, and from a child under ``loadprobe record --otlp``); what it writes analyses to every span
sent. Bad requests, the memory cap and a clean stop on SIGTERM are exercised over real sockets."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pyarrow.parquet as pq
import pytest

import loadprobe
from loadprobe.record.receiver import Receiver

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def send_requests(endpoint: str, n: int, service: str = "svc") -> None:
    """``n`` requests of two stages each, exported by the SDK's OTLP/HTTP (protobuf) exporter."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), max_export_batch_size=64,
                                                   schedule_delay_millis=50))
    tracer = provider.get_tracer("test")
    for i in range(n):
        with tracer.start_as_current_span("POST /x", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("embed", attributes={"loadprobe.batch": 1 + i % 4}):
                pass
            with tracer.start_as_current_span("score"):
                pass
    provider.shutdown()  # flushes: every span has been sent and answered


def post(endpoint: str, body: bytes, content_type: str, encoding: str | None = None):
    request = urllib.request.Request(endpoint, data=body, method="POST", headers={"Content-Type": content_type})
    if encoding:
        request.add_header("Content-Encoding", encoding)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def json_body(n: int) -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "json-svc", "host.name": "h9"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for _ in range(n):
        with provider.get_tracer("t").start_as_current_span("GET /", kind=SpanKind.SERVER):
            pass
    return encode_json(exporter.get_finished_spans()).to_json().encode()


def test_sdk_exporter_spans_become_a_recording(tmp_path):
    with Receiver(tmp_path / "data", "127.0.0.1:0", flush_interval_s=0.1) as receiver:
        send_requests(receiver.endpoint, 300)
    assert receiver.counters()["spans_received"] == 900 and receiver.counters()["spans_refused"] == 0
    run = next((tmp_path / "data").glob("*/svc/*"))
    assert not list(run.glob(".*.arrows"))  # every segment finished as Parquet on stop
    info = json.loads((run / "run.json").read_text())
    assert info["role"] == "received" and info["stopped_ns"] and info["counters"]["spans_written"] == 900
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    assert portrait.requests.count == 300
    assert {s.name: s.count for s in portrait.stages} == {"POST /x": 300, "embed": 300, "score": 300}


def test_startup_traces_sent_before_the_first_request_are_not_requests(tmp_path):
    """An engine traces its start (internal roots) long before it serves (server spans), as vLLM does."""
    with Receiver(tmp_path / "data", "127.0.0.1:0", flush_interval_s=0.05) as receiver:
        provider = TracerProvider(resource=Resource.create({"service.name": "engine"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
        with provider.get_tracer("t").start_as_current_span("Overall Loading"):
            with provider.get_tracer("t").start_as_current_span("Load weights"):
                pass
        receiver.flush()  # flushes come and go while the engine starts
        provider.shutdown()
        send_requests(receiver.endpoint, 20, service="engine")
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    assert portrait.requests.count == 20
    assert {s.name for s in portrait.stages if s.share} == {"POST /x", "embed", "score"}


def test_json_and_gzip_bodies_are_received_and_bad_ones_refused(tmp_path):
    with loadprobe.receive_otlp(tmp_path / "data", "127.0.0.1:0", max_body_bytes=1 << 20) as receiver:
        url = receiver.endpoint
        status, body, headers = post(url, json_body(5), "application/json")
        assert (status, body, headers["Content-Type"]) == (200, b"{}", "application/json")
        assert post(url, gzip.compress(json_body(7)), "application/json", "gzip")[0] == 200
        status, body, _ = post(url, b'{"resourceSpans": 7}', "application/json")
        assert status == 400 and b"not an OTLP traces message" in body
        assert post(url, b"\x0a\xff\xff", "application/x-protobuf")[0] == 400
        assert post(url, b"not gzip", "application/json", "gzip")[0] == 400
        assert post(url, b"x" * ((1 << 20) + 1), "application/json")[0] == 413
        assert post(url.replace("/v1/traces", "/v1/metrics"), b"{}", "application/json")[0] == 404
    assert receiver.counters()["bad_requests"] == 5 and receiver.counters()["spans_received"] == 12  # the 404 too
    rows = pq.read_table(next((tmp_path / "data").rglob("spans-*.parquet"))).to_pylist()
    assert len(rows) == 12 and next((tmp_path / "data").glob("h9/json-svc/*"))  # host.name kept


def test_past_the_memory_cap_requests_are_refused_to_be_retried_and_counted(tmp_path):
    receiver = Receiver(tmp_path / "data", "127.0.0.1:0", max_buffered_spans=10, flush_interval_s=3600).start()
    try:
        assert post(receiver.endpoint, json_body(8), "application/json")[0] == 200
        status, _, headers = post(receiver.endpoint, json_body(8), "application/json")
        assert status == 503 and headers["Retry-After"] == "1"
        receiver.flush()
        assert post(receiver.endpoint, json_body(8), "application/json")[0] == 200
    finally:
        receiver.stop()
    assert receiver.counters()["spans_refused"] == 8 and receiver.counters()["spans_received"] == 16
    info = json.loads(next((tmp_path / "data").rglob("run.json")).read_text())
    assert info["counters"]["spans_written"] == 16 and info["receiver"]["spans_refused"] == 8


def test_a_run_folder_that_cannot_be_made_costs_no_traceback_and_is_counted(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "blocked").write_text("a file where the host's folder would go")
    receiver = Receiver(tmp_path / "data", "127.0.0.1:0", host="blocked", flush_interval_s=0.05).start()
    try:
        assert post(receiver.endpoint, json_body(3), "application/json")[0] == 200
        time.sleep(0.3)  # flushes come and go: the spans wait, the sender was answered
        assert post(receiver.endpoint, json_body(3), "application/json")[0] == 200
    finally:
        receiver.stop()
    assert receiver.counters()["spans_lost"] == 6
    assert "received spans are lost" in capsys.readouterr().err
    assert (tmp_path / "data" / "blocked").read_text().startswith("a file")


def _start_cli(tmp_path, *args):
    process = subprocess.Popen([sys.executable, "-m", "loadprobe", "record", "--otlp", "127.0.0.1:0", "-o",
                                str(tmp_path / "data"), *args], stderr=subprocess.PIPE, text=True)
    line = process.stderr.readline()
    assert "receiving OpenTelemetry traces at" in line, line
    return process, line.split(" at ", 1)[1].split(" -> ")[0]


def test_record_otlp_receives_until_sigterm_and_finishes_its_files(tmp_path):
    process, endpoint = _start_cli(tmp_path)
    try:
        send_requests(endpoint, 50, service="api")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "received 150 spans" in err and "(api)" in err
    run = next((tmp_path / "data").glob("*/api/*"))
    assert list(run.glob("spans-*.parquet")) and not list(run.glob(".*.arrows"))
    assert loadprobe.analyze([str(tmp_path / "data")]).requests.count == 50


CHILD = """
import time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

provider = TracerProvider()  # service name and endpoint: from the environment loadprobe record gives
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("child")
for _ in range(40):
    with tracer.start_as_current_span("handle"):
        time.sleep(0.001)
provider.shutdown()
"""


def test_a_command_under_record_otlp_sends_its_spans_as_the_recorded_service(tmp_path):
    script = tmp_path / "engine.py"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.run([sys.executable, "-m", "loadprobe", "record", "--otlp", "127.0.0.1:0", "--no-devices",
                              "-o", str(tmp_path / "data"), "--", sys.executable, str(script)],
                             capture_output=True, text=True, timeout=90, env=env)
    assert process.returncode == 0, process.stderr
    runs = list((tmp_path / "data").glob("*/*/*/run.json"))
    assert {p.parent.parent.name for p in runs} == {"engine"}  # the received spans are the command's service
    assert loadprobe.analyze([str(tmp_path / "data")]).requests.count == 40


@pytest.mark.parametrize("given", [None, "scorer"])
def test_a_command_whose_sdk_names_its_own_service(tmp_path, given):
    """An SDK that sets service.name in code ignores OTEL_SERVICE_NAME: its spans and the device samples would be two
    services. With --service, every span is filed under it; without, the run says so and how to make them one."""
    script = tmp_path / "engine.py"
    script.write_text(CHILD.replace("TracerProvider()", "TracerProvider(resource=Resource.create({'service.name': "
                                                        "'named-in-code'}))")
                      .replace("import time", "import time\nfrom opentelemetry.sdk.resources import Resource"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = subprocess.run([sys.executable, "-m", "loadprobe", "record", "--otlp", "127.0.0.1:0",
                              *(["--service", given] if given else []), "-o", str(tmp_path / "data"), "--",
                              sys.executable, str(script)], capture_output=True, text=True, timeout=90, env=env)
    assert process.returncode == 0, process.stderr
    services = {p.parent.parent.name for p in (tmp_path / "data").glob("*/*/*/run.json")}
    if given:  # the devices were sampled as it too
        assert services == {"scorer"} and "warning" not in process.stderr
        assert loadprobe.analyze([str(tmp_path / "data")]).requests.count == 40
    else:
        assert services == {"named-in-code", "engine"}
        assert "the spans came as service 'named-in-code'" in process.stderr and "as 'engine'" in process.stderr
        assert "--service named-in-code" in process.stderr


def test_record_without_command_or_otlp_says_how(tmp_path):
    out = subprocess.run([sys.executable, "-m", "loadprobe", "record", "-o", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--otlp HOST:PORT" in out.stderr
    out = subprocess.run([sys.executable, "-m", "loadprobe", "record", "--otlp", "nonsense", "-o", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "expected HOST:PORT" in out.stderr


def test_chunked_bodies_keep_alive_after_refusals_and_gzip_bombs(tmp_path):
    """The JavaScript exporter sends chunked bodies; a refused request must not spoil the connection
    it came on; a small gzip that unpacks past the body limit is refused before it is unpacked whole."""
    import http.client

    with Receiver(tmp_path / "data", "127.0.0.1:0", max_body_bytes=1 << 20) as receiver:
        host, port = receiver.address
        connection = http.client.HTTPConnection(host, port, timeout=10)
        connection.connect()
        connection.request("POST", "/v1/metrics", body=b"{}", headers={"Content-Type": "application/json"})
        refused = connection.getresponse()
        assert (refused.status, bool(refused.read())) == (404, True)
        body = json_body(4)
        connection.request("POST", "/v1/traces", body=iter([body[:100], body[100:]]),
                           headers={"Content-Type": "application/json"}, encode_chunked=True)
        answer = connection.getresponse()
        assert (answer.status, answer.read()) == (200, b"{}")
        bomb = gzip.compress(b" " * (8 << 20))  # 8 MiB of spaces in a few KiB
        status, body, _ = post(receiver.endpoint, bomb, "application/json", "gzip")
        assert status == 413 and b"once unpacked" in body
        connection.close()
    assert receiver.counters()["spans_received"] == 4 and receiver.counters()["bad_requests"] == 2
