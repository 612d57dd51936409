"""OpenTelemetry trace files in: spans made by the real OpenTelemetry SDK, encoded by its own OTLP
encoders (JSON and protobuf), written as the Collector's file exporter writes them, imported and
analysed. Every request and stage must be counted and the stage shares must equal those computed
straight from the SDK's spans."""

from __future__ import annotations

import base64
import gzip
import json
from collections import defaultdict

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe.cli import main
from loadprobe.record import otlp
from loadprobe.record.otlp_import import import_otlp
from loadprobe.schema import FIRST_TOKEN, LAST_TOKEN

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace as api  # noqa: E402
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, Status, StatusCode  # noqa: E402

pytestmark = pytest.mark.timeout(120)

MESSAGE_SPANS = 50  # spans per exported message, as a batch processor would send them


def _tracer(service: str, host: str = "h1"):
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider(resource=Resource.create({"service.name": service, "host.name": host}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def _at(tracer, name, start, end, **kwargs):
    """A span with given epoch-ns times (the SDK's own clock would make the shares depend on this machine)."""
    span = tracer.start_span(name, start_time=start, **kwargs)
    return span, end


def make_spans(requests: int = 120):
    """Two services' spans from the SDK: an API whose requests run tokenize -> (model -> kernel) -> reply,
    with batch sizes, engines, tokens and some errors; and a scorer called by it across processes
    (its server span's parent is the API's client span, in another process)."""
    api_tracer, api_spans = _tracer("api")
    scorer_tracer, scorer_spans = _tracer("scorer", host="h2")
    t = 1_780_000_000_000_000_000
    for i in range(requests):
        root = api_tracer.start_span("POST /v1/embed", kind=SpanKind.SERVER, start_time=t,
                                     attributes={"http.request.header.x-request-id": [f"req-{i}"]})
        context = api.set_span_in_context(root)
        tokenize = api_tracer.start_span("tokenize", context=context, start_time=t + 100_000,
                                         attributes={"gen_ai.usage.input_tokens": 10 + i % 7})
        tokenize.end(end_time=t + 400_000 + 1_000 * (i % 5))
        model = api_tracer.start_span("model", context=context, start_time=t + 500_000,
                                      attributes={"loadprobe.batch": 1 + i % 4, "loadprobe.engine": "gpu0",
                                                  "loadprobe.flops": 2e9, "loadprobe.bytes": 1e8})
        kernel = api_tracer.start_span("kernel", context=api.set_span_in_context(model), start_time=t + 600_000)
        kernel.end(end_time=t + 2_600_000 + 10_000 * (i % 3))
        model.end(end_time=t + 3_000_000 + 10_000 * (i % 3))
        call = api_tracer.start_span("call scorer", context=context, kind=SpanKind.CLIENT, start_time=t + 3_100_000)
        arrived = api.NonRecordingSpan(api.SpanContext(call.context.trace_id, call.context.span_id, is_remote=True,
                                                       trace_flags=call.context.trace_flags))  # via traceparent
        served = scorer_tracer.start_span("score", context=api.set_span_in_context(arrived), kind=SpanKind.SERVER,
                                          start_time=t + 3_200_000)
        if i % 10 == 0:
            served.set_status(Status(StatusCode.ERROR, "scorer failed"))
        served.end(end_time=t + 3_800_000 + 5_000 * (i % 4))
        call.end(end_time=t + 3_900_000 + 5_000 * (i % 4))
        root.end(end_time=t + 4_500_000 + 20_000 * (i % 6))
        t += 7_000_000  # one request every 7 ms
    return list(api_spans.get_finished_spans()) + list(scorer_spans.get_finished_spans())


def _messages(spans):
    return [spans[k:k + MESSAGE_SPANS] for k in range(0, len(spans), MESSAGE_SPANS)]


def write_json_lines(path, spans):
    with open(path, "w", encoding="utf-8") as f:
        for message in _messages(spans):
            f.write(encode_json(message).to_json() + "\n")


def write_proto(path, spans):
    with open(path, "wb") as f:
        for message in _messages(spans):
            data = encode_proto(message).SerializeToString()
            f.write(len(data).to_bytes(4, "big") + data)


def expected_shares(spans, service: str) -> dict:
    """Each stage's share of request time, from the SDK's spans: its time over the requests' time."""
    mine = [s for s in spans if s.resource.attributes["service.name"] == service]
    ids = {s.context.span_id for s in mine}
    requests = [s for s in mine if s.parent is None or s.parent.span_id not in ids]
    total = sum(s.end_time - s.start_time for s in requests)
    by_stage = defaultdict(int)
    for s in mine:
        by_stage[s.name] += s.end_time - s.start_time
    return {name: ns / total for name, ns in by_stage.items()}, len(requests), len(mine)


@pytest.fixture(scope="module")
def sdk_spans():
    return make_spans()


@pytest.fixture(scope="module")
def files(sdk_spans, tmp_path_factory):
    folder = tmp_path_factory.mktemp("otlp")
    paths = {"json": folder / "traces.jsonl", "proto": folder / "traces.pb"}
    write_json_lines(paths["json"], sdk_spans)
    write_proto(paths["proto"], sdk_spans)
    paths["json.gz"] = folder / "traces.jsonl.gz"
    paths["json.gz"].write_bytes(gzip.compress(paths["json"].read_bytes()))
    paths["proto.gz"] = folder / "traces-proto.gz"  # told by its first bytes, not its name
    paths["proto.gz"].write_bytes(gzip.compress(paths["proto"].read_bytes()))
    paths["bare"] = folder / "body.bin"  # one message, no length prefix: a saved OTLP/HTTP body
    paths["bare"].write_bytes(encode_proto(sdk_spans).SerializeToString())
    paths["pretty"] = folder / "one.json"  # one message over many lines
    paths["pretty"].write_text(json.dumps(json.loads(encode_json(sdk_spans).to_json()), indent=2))
    return paths


@pytest.mark.parametrize("name", ["json", "proto", "json.gz", "proto.gz", "bare", "pretty"])
def test_sdk_spans_import_with_every_request_stage_and_share(files, sdk_spans, tmp_path, name):
    result = import_otlp(files[name], tmp_path / "data")
    assert result.kind == ("json" if name in ("json", "json.gz", "pretty") else "proto")
    assert not result.skipped
    by_service = {run.run_dir.parent.name: run for run in result.runs}
    assert sorted(by_service) == ["api", "scorer"]
    assert by_service["scorer"].run_dir.parent.parent.name == "h2"  # host.name kept
    for service, run in by_service.items():
        shares, requests, spans = expected_shares(sdk_spans, service)
        assert run.rows == spans
        assert result.requests[run.run_dir] == requests
        portrait = loadprobe.analyze([str(tmp_path / "data")], service=service)
        assert portrait.requests.count == requests
        stages = {stage.name: stage for stage in portrait.stages}
        assert set(stages) == set(shares)
        for stage_name, share in shares.items():
            assert stages[stage_name].count == requests
            assert stages[stage_name].share == pytest.approx(share, rel=1e-9)


def test_columns_come_from_attributes_and_parents_are_kept(files, tmp_path):
    result = import_otlp(files["json"], tmp_path / "data")
    api_run = next(run for run in result.runs if run.run_dir.parent.name == "api")
    rows = pq.read_table(next(api_run.run_dir.glob("spans-*.parquet"))).to_pylist()
    by_id = {row["span_id"]: row for row in rows}
    model = next(row for row in rows if row["stage"] == "model")
    assert (model["engine"], model["flops"], model["bytes"]) == ("gpu0", 2e9, 1e8) and 1 <= model["batch"] <= 4
    kernel = next(row for row in rows if row["stage"] == "kernel" and row["parent_id"] == model["span_id"])
    root = by_id[model["parent_id"]]
    assert root["parent_id"] is None and root["stage"] == "POST /v1/embed"
    assert root["request_id"].startswith("req-")  # the request's x-request-id names it and all its spans
    assert kernel["request_id"] == model["request_id"] == root["request_id"]
    assert {row["tokens_in"] for row in rows if row["stage"] == "tokenize"} == set(range(10, 17))
    scorer = pq.read_table(next(next(run for run in result.runs if run.run_dir.parent.name == "scorer")
                                .run_dir.glob("spans-*.parquet"))).to_pylist()
    assert all(row["parent_id"] is None for row in scorer)  # its parent is in another process: a request
    assert sum(row["status"] == "error" for row in scorer) == 12 and len(scorer) == 120


def test_roots_that_are_not_requests_are_recorded_outside_requests(tmp_path):
    """A service that serves (server spans) and also traced its startup (internal roots, sent first)."""
    tracer, exporter = _tracer("engine")
    with tracer.start_as_current_span("Overall Loading"):
        with tracer.start_as_current_span("Load weights"):
            pass
    for _ in range(4):
        with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER):
            with tracer.start_as_current_span("step"):
                pass
    write_json_lines(tmp_path / "t.jsonl", list(exporter.get_finished_spans()))
    result = import_otlp(tmp_path / "t.jsonl", tmp_path / "data")
    assert list(result.requests.values()) == [4]
    rows = pq.read_table(next((tmp_path / "data").rglob("spans-*.parquet"))).to_pylist()
    assert {row["stage"] for row in rows if row["request_id"] is None} == {"Overall Loading", "Load weights"}
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    assert portrait.requests.count == 4
    assert {stage.name for stage in portrait.stages if stage.share} == {"llm_request", "step"}


def test_attributes_are_remapped_by_name(tmp_path):
    tracer, exporter = _tracer("svc")
    for i in range(5):
        span = tracer.start_span("step", attributes={"app.batch_size": i + 1, "app.prompt": 9})
        span.end()
    write_json_lines(tmp_path / "t.jsonl", list(exporter.get_finished_spans()))
    runner = CliRunner()
    out = runner.invoke(main, ["import", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "data"),
                               "--attr", "batch=app.batch_size", "--attr", "tokens_in=app.prompt"])
    assert out.exit_code == 0, out.output
    assert "5 requests, 5 spans written" in out.output
    rows = pq.read_table(next((tmp_path / "data").rglob("spans-*.parquet"))).to_pylist()
    assert sorted(row["batch"] for row in rows) == [1, 2, 3, 4, 5] and {row["tokens_in"] for row in rows} == {9}


VLLM = {  # an llm_request span's attributes as vLLM sets them: seconds, as doubles
    "gen_ai.latency.time_to_first_token": 0.0512, "gen_ai.latency.e2e": 0.4301,
    "gen_ai.latency.time_in_queue": 0.0105, "gen_ai.latency.time_in_model_prefill": 0.0351,
    "gen_ai.latency.time_in_model_decode": 0.3702, "gen_ai.latency.time_in_model_inference": 0.4053,
    "gen_ai.usage.prompt_tokens": 48, "gen_ai.usage.completion_tokens": 32, "gen_ai.request.id": "cmpl-1",
}


def test_genai_request_span_opens_into_queue_prefill_and_decode(tmp_path):
    tracer, exporter = _tracer("vllm")
    start = 1_780_000_000_000_000_000
    for i in range(3):
        span = tracer.start_span("llm_request", kind=SpanKind.SERVER, start_time=start + i * 10**9,
                                 attributes={**VLLM, "gen_ai.latency.e2e": VLLM["gen_ai.latency.e2e"] + i * 0.001})
        span.end(end_time=start + i * 10**9 + 431_000_000 + i * 1_000_000)  # ended a little after its e2e
    write_proto(tmp_path / "t.pb", list(exporter.get_finished_spans()))
    import_otlp(tmp_path / "t.pb", tmp_path / "data")
    rows = pq.read_table(next((tmp_path / "data").rglob("spans-*.parquet"))).to_pylist()
    requests = [row for row in rows if row["parent_id"] is None]
    assert len(requests) == 3 and len(rows) == 18
    for i, request in enumerate(sorted(requests, key=lambda r: r["ts_ns"])):
        phases = {row["stage"]: row for row in rows if row["parent_id"] == request["span_id"]}
        assert request["dur_ns"] == round((VLLM["gen_ai.latency.e2e"] + i * 0.001) * 1e9)
        ttft = phases["prefill"]["ts_ns"] + phases["prefill"]["dur_ns"] - request["ts_ns"]
        assert ttft == round(VLLM["gen_ai.latency.time_to_first_token"] * 1e9)
        # the first-token marker: from the request's start to its first token
        assert (phases[FIRST_TOKEN]["ts_ns"], phases[FIRST_TOKEN]["dur_ns"]) == (request["ts_ns"], ttft)
        assert (phases[LAST_TOKEN]["ts_ns"], phases[LAST_TOKEN]["dur_ns"]) == (phases["decode"]["ts_ns"],
                                                                              phases["decode"]["dur_ns"])
        assert phases["queue"]["ts_ns"] + phases["queue"]["dur_ns"] == phases["prefill"]["ts_ns"]
        assert phases["decode"]["ts_ns"] == phases["prefill"]["ts_ns"] + phases["prefill"]["dur_ns"]
        for phase, key in (("queue", "time_in_queue"), ("prefill", "time_in_model_prefill"),
                           ("decode", "time_in_model_decode")):
            assert phases[phase]["dur_ns"] == round(VLLM[f"gen_ai.latency.{key}"] * 1e9)
        assert (request["tokens_in"], request["tokens_out"]) == (48, 32)
        assert (phases["prefill"]["tokens_in"], phases["decode"]["tokens_out"]) == (48, 31)
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    stages = {stage.name: stage for stage in portrait.stages}
    assert stages["decode"].share == pytest.approx(0.3702 / (0.4301 + 0.001), rel=0.01)
    assert FIRST_TOKEN not in stages  # a marker times the output; it is no stage of work
    llm = portrait.llm  # the engine's own view, from its spans: TTFT, TPOT from decode, tokens
    assert (llm.source, llm.requests, llm.itl_ms) == ("service", 3, None)
    assert llm.ttft_ms.mean == pytest.approx(51.2, abs=1e-6)
    assert llm.tpot_ms.mean == pytest.approx(370.2 / 31, rel=1e-6)  # the decode / (tokens - 1), as vLLM counts it
    assert (llm.tokens_in.total, llm.tokens_out.total) == (3 * 48, 3 * 32)


def test_integer_genai_latencies_are_nanoseconds(tmp_path):
    tracer, exporter = _tracer("engine")
    span = tracer.start_span("chat", start_time=1_780_000_000_000_000_000,
                             attributes={"gen_ai.latency.time_in_model_prefill": 2_000_000,
                                         "gen_ai.latency.time_in_model_decode": 8_000_000})
    span.end(end_time=1_780_000_000_012_000_000)
    write_json_lines(tmp_path / "t.jsonl", list(exporter.get_finished_spans()))
    import_otlp(tmp_path / "t.jsonl", tmp_path / "data")
    rows = {row["stage"]: row for row in pq.read_table(next((tmp_path / "data").rglob("spans-*.parquet"))).to_pylist()}
    assert (rows["prefill"]["dur_ns"], rows["decode"]["dur_ns"], rows["chat"]["dur_ns"]) == (2_000_000, 8_000_000,
                                                                                            12_000_000)


def test_a_file_cut_short_keeps_its_whole_messages_and_says_so(files, sdk_spans, tmp_path):
    data = files["proto"].read_bytes()
    (tmp_path / "cut.pb").write_bytes(data[:-100])  # inside the last message
    out = CliRunner().invoke(main, ["import", str(tmp_path / "cut.pb"), "-o", str(tmp_path / "data")])
    assert out.exit_code == 0, out.output
    assert "left out: a message cut short at the end of the file: 1" in out.output
    rows = sum(pq.read_metadata(p).num_rows for p in (tmp_path / "data").rglob("spans-*.parquet"))
    assert rows == len(sdk_spans) - (len(sdk_spans) % MESSAGE_SPANS or MESSAGE_SPANS)


@pytest.mark.parametrize("content, says", [
    (b'{"resourceSpans": 5}\n', "not an OTLP traces message"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "00"}]}]}]}\n',
     "no spans to import (left out: spans with no valid span id: 1)"),
    (b'{"resourceSpans": ' + b"[" * 100_000 + b"\n", "not valid JSON"),
    (b'{"resourceSpans": []}\n{"resourceSpans": [}\n{"resourceSpans": []}\n', "line 2: not valid JSON"),
    (b"\x00\x00\x00\x05\x0a\x03abc", "not an OTLP traces message"),
    (b"\xff\xff\xff\xff", "a message of 4,294,967,295 bytes"),
], ids=["not-a-list", "bad-ids", "nested-deep", "bad-line-2", "bad-protobuf", "huge-prefix"])
def test_bad_otlp_is_refused_in_one_line(tmp_path, content, says):
    path = tmp_path / ("bad.pb" if content[:1] != b"{" else "bad.jsonl")
    path.write_bytes(content)
    out = CliRunner().invoke(main, ["import", str(path), "-o", str(tmp_path / "data")])
    assert out.exit_code == 2, out.output
    assert says in out.output and str(path) in out.output and "Traceback" not in out.output
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*.parquet"))
    assert path.read_bytes() == content


def test_log_options_on_an_otlp_file_are_refused(files, tmp_path):
    out = CliRunner().invoke(main, ["import", str(files["json"]), "--ts-col", "x", "-o", str(tmp_path / "d")])
    assert out.exit_code == 2 and "--ts-col is for CSV/JSONL logs" in out.output
    log = tmp_path / "log.csv"
    log.write_text("ts,latency_ms\n1,2\n")
    out = CliRunner().invoke(main, ["import", str(log), "--attr", "batch=x", "-o", str(tmp_path / "d")])
    assert out.exit_code == 2 and "--attr is for OpenTelemetry" in out.output


def test_sniff_tells_otlp_from_request_logs(files, tmp_path):
    (tmp_path / "log.jsonl").write_text('{"ts": 1, "latency_ms": 2}\n')
    assert otlp.sniff(tmp_path / "log.jsonl") is None
    assert otlp.sniff(files["json"]) == "json" and otlp.sniff(files["proto"]) == "proto"
    assert otlp.sniff(files["bare"]) == "proto" and otlp.sniff(files["proto.gz"]) == "proto"


def test_a_gzip_file_cut_short_keeps_its_whole_messages(files, sdk_spans, tmp_path):
    data = gzip.compress(files["json"].read_bytes())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) * 3 // 4])  # a compressed file still being written
    result = import_otlp(tmp_path / "cut.jsonl.gz", tmp_path / "data")
    assert set(result.skipped) == {otlp.CUT_SHORT}
    assert 0 < sum(run.rows for run in result.runs) < len(sdk_spans)


def test_shapes_from_arrays_base64_ids_and_work_that_outlives_its_request(tmp_path):
    tracer, exporter = _tracer("svc")
    root = tracer.start_span("POST /x", kind=SpanKind.SERVER, start_time=1_780_000_000_000_000_000,
                             attributes={"http.request.header.x-request-id": ["r-1"]})
    context = api.set_span_in_context(root)
    step = tracer.start_span("step", context=context, start_time=1_780_000_000_000_100_000,
                             attributes={"loadprobe.shape": [4, 3, 224, 224]})
    step.end(end_time=1_780_000_000_000_200_000)
    late = tracer.start_span("audit", context=context, start_time=1_780_000_000_000_300_000)
    root.end(end_time=1_780_000_000_000_400_000)
    late.end(end_time=1_780_000_000_000_900_000)  # sent after its request's root
    document = json.loads(encode_json(list(exporter.get_finished_spans())).to_json())
    for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # ids as protobuf's own JSON mapping writes them
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key):
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    (tmp_path / "t.jsonl").write_text(json.dumps(document) + "\n")
    import_otlp(tmp_path / "t.jsonl", tmp_path / "data")
    rows = {row["stage"]: row for row in pq.read_table(next((tmp_path / "data").rglob("spans-*.parquet"))).to_pylist()}
    assert rows["step"]["shape"] == "4x3x224x224"
    assert {row["request_id"] for row in rows.values()} == {"r-1"}
    assert rows["audit"]["parent_id"] == rows["POST /x"]["span_id"]


def test_two_requests_in_one_trace_keep_their_own_spans(tmp_path):
    """A client calling the service twice at once within one trace (a fan-out): each call keeps its stages."""
    tracer, exporter = _tracer("svc")
    t = 1_780_000_000_000_000_000
    caller = api.NonRecordingSpan(api.SpanContext(0x1234, 0x99, is_remote=True, trace_flags=api.TraceFlags(1)))
    a = tracer.start_span("A", kind=SpanKind.SERVER, context=api.set_span_in_context(caller), start_time=t,
                          attributes={"http.request.header.x-request-id": ["A"]})
    b = tracer.start_span("B", kind=SpanKind.SERVER, context=api.set_span_in_context(caller), start_time=t,
                          attributes={"http.request.header.x-request-id": ["B"]})
    child_b = tracer.start_span("c_of_B", context=api.set_span_in_context(b), start_time=t + 10)
    child_b.end(end_time=t + 20)   # sent before A and B end
    a.end(end_time=t + 30)          # A's root comes first: it must not take B's child
    grand = tracer.start_span("g_of_B", context=api.set_span_in_context(child_b), start_time=t + 12)
    grand.end(end_time=t + 50)      # outlives its parent's request root? no: B ends last
    b.end(end_time=t + 60)
    write_json_lines(tmp_path / "t.jsonl", list(exporter.get_finished_spans()))
    import_otlp(tmp_path / "t.jsonl", tmp_path / "data")
    rows = {row["stage"]: row["request_id"] for row in
            pq.read_table(next((tmp_path / "data").rglob("spans-*.parquet"))).to_pylist()}
    assert rows == {"A": "A", "B": "B", "c_of_B": "B", "g_of_B": "B"}


def test_invalid_parent_ids_and_text_that_starts_with_a_newline(tmp_path):
    line = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "ab" * 16, "spanId": "01" * 8, "parentSpanId": "zz", "name": "x",
         "startTimeUnixNano": "1780000000000000000", "endTimeUnixNano": "1780000000000001000"},
        {"traceId": "ab" * 16, "spanId": "02" * 8, "name": "root", "kind": 2,
         "startTimeUnixNano": "1780000000000000000", "endTimeUnixNano": "1780000000000002000"}]}]}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(line) + "\n")
    result = import_otlp(tmp_path / "t.jsonl", tmp_path / "data")
    assert result.skipped == {"spans with an invalid parent id": 1} and list(result.requests.values()) == [1]
    (tmp_path / "log.csv").write_text("\nts,latency_ms\n1,2\n")
    assert otlp.sniff(tmp_path / "log.csv") is None  # a newline is also the byte a bare message starts with
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(b"x" * 5000)[:20] + b"\xff" * 200)
    out = CliRunner().invoke(main, ["import", str(tmp_path / "bad.jsonl.gz"), "-o", str(tmp_path / "d")])
    assert out.exit_code == 2 and "internal error" not in out.output


def test_held_spans_are_written_once_they_waited_their_bound(monkeypatch):
    """A receiver's flush writes a child whose root never comes, and an undecided root, once each waited its bound."""
    from loadprobe.record import otlp_spans

    def span(span_id, parent, kind=1, name="s"):
        return otlp.OtlpSpan("svc", "h", "ab" * 16, span_id, parent, 0, kind, name, 10**18, 10**18 + 1000, 0, "", {})

    converter = otlp_spans.Converter()
    list(converter.add([span(2, 7, name="orphan"), span(3, 0, name="internal root")]))
    assert list(converter.drain()) == []  # both wait: a root may come, a server span may come
    monkeypatch.setattr(otlp_spans, "MAX_HELD_S", 0.0)
    monkeypatch.setattr(otlp_spans, "MAX_UNDECIDED_S", 0.0)
    [(_, table)] = list(converter.drain())
    assert sorted(zip(table.column("stage").to_pylist(), table.column("request_id").to_pylist())) == [
        ("internal root", "ab" * 16), ("orphan", "ab" * 16)]
    assert converter.requests == {("h", "svc"): 1}
