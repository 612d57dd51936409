"""Issue #32, points 4 and 5: one service at a time, and one request counted once when the load
client's recording and the server's are analysed together.

A real WSGI server recorded with loadprobe's middleware (which records the x-request-id header) is
driven by a real ``loadprobe load --record`` subprocess; analysis runs through the public API and
the CLI, on every kernel."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

import loadprobe
from loadprobe import LoadprobeError, probe
from loadprobe.instrumentation.wsgi import LoadprobeWSGIMiddleware
from loadprobe.plan.context import service_name
from tests.support.http_servers import serve_wsgi

REQUESTS = 60
UNRECORDED = 5  # the server leaves every 5th request out of its recording (as a sampling server would)


@probe("work")
def _work():
    time.sleep(0.003)


def _ok(start_response, body=None):
    """A 200 with a two-byte body (``body``, an iterable of it, where given)."""
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"] if body is None else body


def _working(work):
    """A WSGI app that does ``work`` and answers."""
    def app(environ, start_response):
        work()
        return _ok(start_response)
    return app


_app = _working(_work)


_RECORDED = LoadprobeWSGIMiddleware(_app, route=lambda environ: "infer")


def _unrecorded(environ, start_response):
    return _ok(start_response)


def _server(environ, start_response):
    rid = environ.get("HTTP_X_REQUEST_ID", "")
    recorded = not rid.endswith(tuple(f"-{n}" for n in range(UNRECORDED, REQUESTS + 1, UNRECORDED)))
    return (_RECORDED if recorded else _unrecorded)(environ, start_response)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "loadprobe", *map(str, args)], capture_output=True, text=True,
                          timeout=240)


@pytest.fixture(scope="module")
def both_sides(tmp_path_factory):
    """(client-data, server-data): the same requests recorded by the load client and by the server."""
    root = tmp_path_factory.mktemp("sides")
    loadprobe.start(root / "server-data", service="web", sample_devices=False, flush_interval_s=0.05)
    try:
        with serve_wsgi(_server) as base:
            done = _cli("load", base + "/infer", "--rate", 200, "--requests", REQUESTS, "--record",
                        root / "client-data")
    finally:
        loadprobe.stop()
    assert done.returncode == 0, done.stderr
    return root / "client-data", root / "server-data"


@pytest.mark.timeout(300)
def test_client_and_server_count_each_request_once(both_sides):
    client, server = both_sides
    portrait = loadprobe.analyze([client, server])
    r = portrait.requests
    assert r.count == REQUESTS and portrait.traffic.requests == REQUESTS  # not 2 x
    recorded = REQUESTS - REQUESTS // UNRECORDED
    assert r.joined_requests == recorded
    assert any(f"{REQUESTS // UNRECORDED:,} of the load client's {REQUESTS:,} requests" in w
               for w in portrait.data_quality.warnings)
    outer, http, work = portrait.stage("client"), portrait.stage("GET infer"), portrait.stage("work")
    assert outer.count == REQUESTS and http.count == work.count == recorded
    # The client's span is the request: all of it; the server's span and its stage are parts of it.
    assert outer.share == pytest.approx(1.0)
    assert 0 < work.share <= http.share < 1
    # What is left of the client's own time is outside the server: network, connections, queueing.
    assert r.outside_server_share == pytest.approx(outer.self_share)
    # (each request's server time is taken off its client time, at most all of it: a WSGI span ends
    # when the body closes, which may be after the client read the response)
    assert outer.self_share >= 1 - http.share - 1e-9
    assert 0 < outer.self_share < 1
    # Time in no probed stage: outside the server, plus the server span's own (a root in its file, as before).
    assert r.outside_server_share < r.unattributed_share < r.outside_server_share + http.self_share + 1e-9
    assert http.start_offset_ms is None
    assert not [v for v in portrait.bottlenecks if v.kind == "dominant_stage" and v.evidence["stage"] == "client"]
    assert service_name(portrait) == "web"  # a plan of it is the server's, not the load client's
    # Each side alone is still its own view.
    assert loadprobe.analyze([server]).requests.count == recorded
    alone = loadprobe.analyze([client]).requests
    assert alone.count == REQUESTS and alone.joined_requests is None


@pytest.mark.timeout(120)
def test_a_request_only_the_server_saw_is_no_time_outside_the_server(both_sides, tmp_path):
    """A health check the load client never sent (recorded by the same service) is a request of the server's:
    its own time is in no probed stage, but not outside the server (it made 'outside the server' 93%)."""
    client, server = both_sides
    before = loadprobe.analyze([client, server]).requests
    loadprobe.start(tmp_path / "health", service="web", sample_devices=False)
    with loadprobe.request(name="GET health"):
        time.sleep(0.2)  # a cold first call: as long as all the joined requests together
    loadprobe.stop()
    after = loadprobe.analyze([client, server, tmp_path / "health"]).requests
    assert after.count == before.count + 1 and after.joined_requests == before.joined_requests
    # The same time outside the server, over a longer total: a smaller share, never a larger one.
    assert after.outside_server_share < before.outside_server_share
    assert after.unattributed_share > before.unattributed_share  # its time is in no probed stage


@pytest.mark.timeout(300)
def test_the_join_gives_one_portrait_on_every_kernel_and_engine(both_sides):
    from loadprobe.analysis.kernels import kernel_available

    def figures(**options):
        data = loadprobe.analyze(list(both_sides), **options).to_dict()
        data.pop("generated_at")
        return data

    reference = figures(kernel="numpy")
    if kernel_available():
        assert figures(kernel="c") == reference
    assert figures(kernel="numpy", engine="process", workers=2) == reference
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return
    assert figures(kernel="numpy", engine="dask", workers=2) == reference


@pytest.mark.timeout(300)
def test_the_cli_reports_the_requests_once(both_sides, tmp_path):
    done = _cli("analyze", *both_sides, "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    portrait = json.loads((tmp_path / "out" / "portrait.json").read_text())
    assert portrait["requests"]["count"] == REQUESTS and portrait["traffic"]["requests"] == REQUESTS
    assert "client dominates" not in done.stdout
    assert "outside the server" in done.stdout and f"{REQUESTS:,} requests joined" in done.stdout
    assert "outside the server, as the load client saw it" in (tmp_path / "out" / "portrait.html").read_text()


@pytest.mark.timeout(120)
def test_two_imported_logs_are_two_services(tmp_path):
    for name, step in (("api", 1), ("batch", 7)):
        rows = "".join(f"2026-12-02T10:00:{i * step % 60:02d}Z,{5 + i}\n" for i in range(20))
        (tmp_path / f"{name}.csv").write_text("timestamp,latency_ms\n" + rows)
        assert _cli("import", tmp_path / f"{name}.csv", "-o", tmp_path / "data", "--latency-col", "latency_ms",
                    "--latency-unit", "ms").returncode == 0
    done = _cli("analyze", tmp_path / "data", "-o", tmp_path / "out")
    assert done.returncode == 2 and "2 services (api, batch)" in done.stderr and "Traceback" not in done.stderr
    assert _cli("analyze", tmp_path / "data", "-o", tmp_path / "out", "--service", "api").returncode == 0
    assert json.loads((tmp_path / "out" / "portrait.json").read_text())["requests"]["count"] == 20


def _record(root, service, n=5):
    loadprobe.start(root, service=service, sample_devices=False)
    for i in range(n):
        with loadprobe.request(id=f"{service}-{i}"):
            _work()
    loadprobe.stop()


@pytest.mark.timeout(120)
def test_several_services_are_refused_in_one_line_that_names_them(tmp_path):
    data = tmp_path / "data"
    _record(data, "server")
    _record(data, "batch-scorer")
    with pytest.raises(LoadprobeError, match=r"2 services \(batch-scorer, server\).*--service NAME.*--each-service"):
        loadprobe.analyze([data])
    assert loadprobe.analyze([data], service="server").requests.count == 5
    with pytest.raises(LoadprobeError, match=r"--service '\*' matches 2 services"):
        loadprobe.analyze([data], service="*")
    with pytest.raises(LoadprobeError, match="no loadprobe data for --service 'nothing'.*batch-scorer, server"):
        loadprobe.analyze([data], service="nothing")
    done = _cli("analyze", data, "-o", tmp_path / "out")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "batch-scorer, server" in done.stderr
    assert not (tmp_path / "out" / "portrait.json").exists()


@pytest.mark.timeout(120)
def test_a_service_is_found_by_the_name_it_was_given_before_it_was_stored_directory_safe(tmp_path):
    data = tmp_path / "data"
    _record(data, "my scorer")
    _record(data, "scorer[2]")  # a glob's characters too
    _record(data, "server")
    assert {p.name for p in data.glob("*/*")} == {"my_scorer", "scorer_2_", "server"}
    assert loadprobe.analyze([data], service="my scorer").requests.count == 5
    assert loadprobe.analyze([data], service="my_scorer").requests.count == 5
    assert loadprobe.analyze([data], service="scorer[2]").requests.count == 5
    with pytest.raises(LoadprobeError, match="no loadprobe data for --service 'my scorers'"):
        loadprobe.analyze([data], service="my scorers")


@pytest.mark.timeout(240)
def test_each_service_writes_a_portrait_per_service_inside_the_folder(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    _record(data, "server")
    _record(data, "batch", n=3)
    # run.json names the service; whatever it says is a name, not a path: its folder is made a name
    (info_path,) = data.rglob("batch/*/run.json")
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps({**info, "service": "../batch scorer"}))
    done = _cli("analyze", data, "-o", out, "--each-service")
    assert done.returncode == 0, done.stderr
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("portrait.*"))
    assert written == ["out/batch_scorer/portrait.html", "out/batch_scorer/portrait.json",
                       "out/server/portrait.html", "out/server/portrait.json"]
    counts = {p.parent.name: json.loads(p.read_text())["requests"]["count"] for p in out.glob("*/portrait.json")}
    assert counts == {"server": 5, "batch_scorer": 3}
    again = _cli("analyze", data, "-o", out, "--each-service")
    assert again.returncode == 2 and "exists; pass --force" in again.stderr and "Traceback" not in again.stderr
    assert _cli("analyze", data, "-o", out, "--each-service", "--force").returncode == 0
    none = _cli("analyze", data, "-o", out, "--each-service", "--service", "nothing")
    assert none.returncode == 2 and "no loadprobe data for --service 'nothing'" in none.stderr


@pytest.mark.timeout(240)
def test_a_load_client_sharing_no_request_id_is_a_service_of_its_own(both_sides, tmp_path):
    client, _ = both_sides
    other = tmp_path / "other"
    _record(other, "batch")
    with pytest.raises(LoadprobeError, match="shares no request id"):
        loadprobe.analyze([client, other])
    assert loadprobe.analyze([client, other], service="batch").requests.count == 5  # the client left out
    done = _cli("analyze", client, other, "-o", tmp_path / "out", "--each-service", "--no-html")
    assert done.returncode == 0, done.stderr
    counts = {p.parent.name: json.loads(p.read_text())["requests"]["count"]
              for p in (tmp_path / "out").glob("*/portrait.json")}
    assert counts == {"batch": 5, "loadprobe-load": REQUESTS}


@pytest.mark.timeout(300)
def test_a_server_traced_with_opentelemetry_pairs_with_the_client_by_the_trace_id_it_sent(tmp_path):
    """A server that records no x-request-id, only OpenTelemetry spans in the trace the client's
    ``traceparent`` started (as vLLM does): its requests are the client's, counted once."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from loadprobe.record.otlp_import import import_otlp

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "traced", "host.name": "h1"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")

    def app(environ, start_response):
        context = TraceContextTextMapPropagator().extract({"traceparent": environ.get("HTTP_TRACEPARENT", "")})
        with tracer.start_as_current_span("POST /infer", context=context, kind=trace.SpanKind.SERVER):
            with tracer.start_as_current_span("work"):
                time.sleep(0.003)
        return _ok(start_response)

    with serve_wsgi(app) as base:
        done = _cli("load", base + "/infer", "--rate", 200, "--requests", REQUESTS, "--record", tmp_path / "client")
    assert done.returncode == 0, done.stderr
    spans = exporter.get_finished_spans()
    (tmp_path / "traces.jsonl").write_text(encode_spans(spans).to_json() + "\n")
    import_otlp(tmp_path / "traces.jsonl", tmp_path / "server")

    portrait = loadprobe.analyze([tmp_path / "client", tmp_path / "server"])
    assert portrait.requests.count == REQUESTS and portrait.requests.joined_requests == REQUESTS
    assert portrait.stage("client").share == pytest.approx(1.0)
    assert portrait.stage("work").count == REQUESTS and 0 < portrait.stage("work").share < 1
    # ... and a folder of both sides holds one service to portray, the client joined to it
    from loadprobe.analysis.run import services

    assert services([tmp_path]) == ["traced"]


class _SlowClose:
    """A response body whose close() runs on after the client has all of it (a WSGI span ends at close)."""

    def __iter__(self):
        yield b"ok"

    def close(self):
        time.sleep(0.02)


def _slow_close(environ, start_response):
    return _ok(start_response, _SlowClose())


def _served_and_loaded(tmp_path, app) -> None:
    """``app`` served under a recorder (server-data/), 20 requests sent one at a time by ``loadprobe load --record``
    (client-data/)."""
    loadprobe.start(tmp_path / "server-data", service="web", sample_devices=False, flush_interval_s=0.05)
    try:
        with serve_wsgi(LoadprobeWSGIMiddleware(app, route=lambda environ: "infer")) as base:
            done = _cli("load", base + "/infer", "--concurrency", 1, "--requests", 20, "--record",
                        tmp_path / "client-data")
    finally:
        loadprobe.stop()
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(300)
def test_a_server_span_ending_after_its_client_span_stays_inside_the_request(tmp_path):
    _served_and_loaded(tmp_path, _slow_close)
    alone = loadprobe.analyze([tmp_path / "server-data"]).stage("GET infer")
    portrait = loadprobe.analyze([tmp_path / "client-data", tmp_path / "server-data"])
    outer, http = portrait.stage("client"), portrait.stage("GET infer")
    assert portrait.requests.joined_requests == 20
    # Alone, the server's span holds the 20 ms close; joined, it is cut at the client's end.
    assert alone.latency_ms.mean > 20 and http.latency_ms.mean <= outer.latency_ms.mean + 1e-9
    assert 0 < http.share <= 1 + 1e-9 and outer.self_share >= 0


def _second_root(environ, start_response):
    """Each request also opens a span of its own request id on another thread, with no parent: a second root."""
    import threading

    def audit():
        with loadprobe.request(id=environ.get("HTTP_X_REQUEST_ID"), name="audit"):
            time.sleep(0.001)

    worker = threading.Thread(target=audit)
    worker.start()
    worker.join()
    return _ok(start_response)


@pytest.mark.timeout(300)
def test_two_server_roots_of_one_request_join_it_once_and_say_so(tmp_path):
    _served_and_loaded(tmp_path, _second_root)
    portrait = loadprobe.analyze([tmp_path / "client-data", tmp_path / "server-data"])
    assert portrait.requests.count == 20 and portrait.requests.joined_requests == 20  # not 40 of 20
    assert any("20 server span(s) with no parent" in w for w in portrait.data_quality.warnings)
    assert portrait.stage("client").self_share >= 0


@pytest.mark.timeout(120)
def test_a_replay_and_a_verify_read_one_service_once(both_sides, tmp_path):
    """``simulate --trace`` and ``load --replay`` read recorded arrivals by analyze's rule: several services are
    refused naming them (``--service`` chooses), and a load client's recording beside its server's gives each
    request once, when the client sent it; ``verify`` reads the service's own spans."""
    import shutil

    from loadprobe.load.schedules import arrivals

    client, server = both_sides
    same = tmp_path / "same"  # both recordings in one folder, as a user may keep them
    shutil.copytree(client, same, dirs_exist_ok=True)
    shutil.copytree(server, same, dirs_exist_ok=True)
    assert len(arrivals(same)) == REQUESTS  # not the client's 60 and the server's 48
    two = tmp_path / "two"
    _record(two, "server")
    _record(two, "batch-scorer")
    with pytest.raises(LoadprobeError, match=r"2 services \(batch-scorer, server\); a replay is of one"):
        arrivals(two)
    assert len(arrivals(two, service="server")) == 5
    plan = tmp_path / "plan" / "pipeline.yaml"
    assert _cli("recommend", server, "--engines", "cpu", "-o", plan).returncode == 0
    done = _cli("simulate", plan, "--trace", two, "-o", tmp_path / "sim")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "batch-scorer, server" in done.stderr
    done = _cli("simulate", plan, "--trace", two, "--service", "server", "-o", tmp_path / "sim", "--json")
    assert done.returncode == 0, done.stderr
    # verify reads the service's own spans: the client's beside them are not its requests.
    reports = {}
    for name, data in (("alone", server), ("joined", same)):
        done = _cli("verify", plan, data, "-o", tmp_path / f"{name}.json")
        assert done.returncode in (0, 1), done.stderr
        reports[name] = json.loads((tmp_path / f"{name}.json").read_text())["before"]
    assert reports["joined"]["requests"] == reports["alone"]["requests"] == REQUESTS - REQUESTS // UNRECORDED
    assert reports["joined"]["root"] == reports["alone"]["root"] == "GET infer"
    assert reports["joined"]["rows"] == reports["alone"]["rows"]
    done = _cli("verify", plan, two)
    assert done.returncode == 2 and "2 services" in done.stderr and "one service's recording" in done.stderr


@probe("slow work")
def _slow_work():
    time.sleep(0.3)


_slow = _working(_slow_work)


@pytest.mark.timeout(300)
def test_a_server_working_on_past_its_client_s_timeout_keeps_its_time(tmp_path):
    """Only a span the client had its answer from is cut at the client's end: a client that gave up after 0.1 s
    does not make 0.3 s of server work read as 0.1 s."""
    loadprobe.start(tmp_path / "server-data", service="web", sample_devices=False, flush_interval_s=0.05)
    try:
        with serve_wsgi(LoadprobeWSGIMiddleware(_slow, route=lambda environ: "infer")) as base:
            _cli("load", base + "/infer", "--concurrency", 1, "--requests", 4, "--timeout", 0.1, "--record",
                 tmp_path / "client-data")
            time.sleep(0.5)  # the last request's server work ends
    finally:
        loadprobe.stop()
    portrait = loadprobe.analyze([tmp_path / "client-data", tmp_path / "server-data"])
    assert portrait.requests.joined_requests == 4
    assert portrait.stage("GET infer").latency_ms.p50 >= 290 and portrait.stage("client").latency_ms.p50 < 200
