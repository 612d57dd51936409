"""``loadprobe load``: schedules as pure functions, then real runs against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe import load
from loadprobe._errors import LoadprobeError
from loadprobe.cli import _Group
from loadprobe.cli import load as cli_load
from loadprobe.cli import import_ as cli_import

from ..conftest import REPO, run_python, spans_in

AZURE_CODE = REPO / "samples" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"


# -- schedules: no network ------------------------------------------------------------------------


def test_constant_schedule_is_evenly_spaced_and_capped():
    offsets = load.constant(200, duration=3)
    assert len(offsets) == 600
    assert np.allclose(np.diff(offsets), 1 / 200)
    assert offsets[0] == 0 and offsets[-1] < 3
    assert len(load.constant(200, duration=3, requests=50)) == 50
    assert len(load.constant(50, requests=120)) == 120  # no duration: long enough for the requests


def test_poisson_schedule_has_the_mean_rate_exponential_gaps_and_is_seeded():
    offsets = load.poisson(1000, duration=20, seed=7)
    expected = 1000 * 20
    assert abs(len(offsets) - expected) < 5 * expected**0.5
    gaps = np.diff(offsets)
    assert np.all(gaps >= 0)
    assert 0.95 < gaps.std() / gaps.mean() < 1.05  # coefficient of variation 1: exponential
    assert np.array_equal(offsets, load.poisson(1000, duration=20, seed=7))
    assert not np.array_equal(offsets[:100], load.poisson(1000, duration=20, seed=8)[:100])


def test_diurnal_schedule_peaks_in_the_middle_at_the_asked_ratio():
    offsets = load.diurnal(500, duration=100, peak_to_mean=3, seed=1)
    assert abs(len(offsets) - 50_000) < 5 * 50_000**0.5  # the mean rate is the given one
    counts, _ = np.histogram(offsets, bins=20, range=(0, 100))
    rates = counts / 5.0
    assert np.argmax(rates) in (9, 10)  # the peak in the middle of the run
    assert rates[0] < rates[10] / 5 and rates[-1] < rates[10] / 5  # valleys at both ends
    assert 2.6 < rates.max() / rates.mean() < 3.1  # ~3x, less a little for the 5 s bins' averaging
    flat = load.diurnal(500, duration=100, peak_to_mean=1, seed=1)
    counts, _ = np.histogram(flat, bins=4, range=(0, 100))
    assert counts.max() / counts.min() < 1.1


def test_bursty_schedule_has_the_on_off_mean_and_is_overdispersed():
    offsets = load.bursty(2000, rate=50, on_s=0.5, off_s=4.5, duration=2000, seed=3)
    mean_rate = (2000 * 0.5 + 50 * 4.5) / 5.0
    # ~400 bursts of random length: the on-time, so the count, is within ~5% (1 sd) of its mean.
    assert 0.85 < len(offsets) / 2000 / mean_rate < 1.15
    counts, _ = np.histogram(offsets, bins=20_000, range=(0, 2000))
    assert counts.var() / counts.mean() > 20  # Poisson would give 1
    assert counts.max() > 100 and np.median(counts) <= 10  # 0.1 s bins: bursts full, gaps near empty
    assert np.array_equal(offsets, load.bursty(2000, rate=50, on_s=0.5, off_s=4.5, duration=2000, seed=3))


def test_replay_of_the_azure_trace_keeps_its_gaps_and_speed_divides_them():
    times = load.arrivals(AZURE_CODE)
    assert len(times) == 8819
    normal = load.replay(times)
    faster = load.replay(times, speed=1.5)
    assert normal[0] == faster[0] == 0
    assert normal[-1] == pytest.approx((times[-1] - times[0]) / 1e9)
    assert faster[-1] == pytest.approx(normal[-1] / 1.5)
    assert np.allclose(faster, normal / 1.5)
    assert len(load.replay(times, speed=1.5, duration=60)) == int((faster < 60).sum())
    assert len(load.replay(times, requests=100)) == 100


def test_replay_of_the_mooncake_trace_with_its_preset():
    if not MOONCAKE.is_file():
        pytest.skip(f"{MOONCAKE} not present (the shared traces folder is not checked out)")
    offsets = load.replay(load.arrivals(MOONCAKE, preset="mooncake"))
    assert len(offsets) == 12031
    assert 3000 < offsets[-1] < 4000  # one hour of traffic


def test_replay_of_recorded_data_uses_the_root_request_spans(tmp_path):
    loadprobe.start(tmp_path / "data", service="svc", sample_devices=False)
    for _ in range(30):
        with loadprobe.request():
            with loadprobe.probe("stage"):  # children: not arrivals
                pass
        time.sleep(0.002)
    loadprobe.stop()
    times = load.arrivals(tmp_path / "data")
    assert len(times) == 30
    spans = spans_in(tmp_path / "data")
    assert sorted(times.tolist()) == sorted(s["ts_ns"] for s in spans if s["parent_id"] is None)
    assert load.replay(times, speed=2)[-1] == pytest.approx((times[-1] - times[0]) / 2e9)


def test_bad_schedules_are_one_line_errors(tmp_path):
    with pytest.raises(LoadprobeError, match=r"--rate 0 must be a positive number"):
        load.constant(0, duration=1)
    with pytest.raises(LoadprobeError, match=r"--rate -5 must be a positive number"):
        load.poisson(-5, duration=1)
    with pytest.raises(LoadprobeError, match=r"--peak-to-mean 0.5 is out of range"):
        load.diurnal(10, duration=1, peak_to_mean=0.5)
    with pytest.raises(LoadprobeError, match=r"--speed 0 must be a positive number"):
        load.replay([1, 2], speed=0)
    with pytest.raises(LoadprobeError, match=r"no such file"):
        load.arrivals(tmp_path / "missing.csv")
    no_time = tmp_path / "no_time.csv"
    no_time.write_text("route,latency_ms\n/a,3\n")
    with pytest.raises(LoadprobeError, match=r"which column holds the request's start time\? give --ts-col"):
        load.arrivals(no_time)


def test_schedules_never_load_the_http_client():
    """The simulator, the planner's simulations and the demo's schedule take arrivals from a module
    without the client: asking for a schedule loads neither asyncio nor the connections."""
    code = ("import json, sys\n"
            "from loadprobe import load\n"
            "from loadprobe.demo import schedule\n"
            "load.poisson(10, duration=1, seed=0); load.replay(load.constant(5, duration=1) * 1e9); schedule(5, 3)\n"
            "print(json.dumps(sorted(sys.modules)))")
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout))
    assert "loadprobe.load.schedules" in modules
    assert not {"asyncio", "loadprobe.load.client", "loadprobe.load.connections"} & modules


def test_the_package_gives_each_public_name_from_the_module_that_owns_it():
    import importlib

    assert {"run", "poisson", "replay", "arrivals", "MAX_ARRIVALS", "LoadReport"} <= set(load._OWNERS)
    for name, owner in load._OWNERS.items():
        assert getattr(load, name) is getattr(importlib.import_module(f"loadprobe.load.{owner}"), name), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        load.nope  # noqa: B018


# -- a real server on 127.0.0.1 -------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """Behaviour by path: /mixed varies the framing and status by request number; /slow serves one at a time."""

    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._serve()

    def do_POST(self):  # noqa: N802
        self._serve()

    def _serve(self):
        server = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        rid = self.headers.get("x-request-id")
        with server.lock:
            server.seen.append((rid, self.command, self.path, body, dict(self.headers)))
            server.peers.add(self.client_address)
        n = int(rid.rsplit("-", 1)[1]) if rid else 0
        path = self.path.split("?")[0]
        if path == "/slow":
            # One at a time, first come first served: offered load above capacity queues up.
            # (A plain Lock hands itself to whichever waiter wakes first, and starved early
            # requests for ~0.7 s now and then: a queue that is not one.)
            with server.turn:
                ticket = server.tickets
                server.tickets += 1
                server.turn.wait_for(lambda: server.serving == ticket)
            time.sleep(server.service_s)
            with server.turn:
                server.serving += 1
                server.turn.notify_all()
            self._reply(200, b"ok")
        elif path == "/hang" and n % 2 == 0:
            time.sleep(0.5)  # past the client's timeout; the client has hung up by then
            self.close_connection = True
        elif path == "/drop" and n % 5 == 0:
            self.close_connection = True  # close without answering
        elif path == "/reset" and n % 5 == 0:
            import socket
            import struct

            # linger 0: the close sends a RST, which the client reads as "Connection reset by peer"
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()  # now: the server's own close would shut the socket down (FIN) first
            self.close_connection = True
        elif path == "/mixed" and n % 10 == 0:
            self._reply(503, b"busy")
        elif path == "/mixed" and n % 2 == 1:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in (b"x" * n, b"\r\n", b"y" * 7):  # a CRLF inside a chunk's data must not confuse the parser
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\nX-Trailer: t\r\n\r\n")
        else:
            self._reply(200, b"z" * n)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog: bursts of new connections must not wait for a SYN retry

    def handle_error(self, request, client_address):
        pass  # clients that hung up on /hang: expected here


@pytest.fixture
def server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.lock, srv.seen, srv.peers, srv.service_s = threading.Lock(), [], set(), 0.01
    srv.turn, srv.tickets, srv.serving = threading.Condition(), 0, 0  # /slow's first-come-first-served queue
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def test_every_request_arrives_once_with_its_id_and_every_framing_is_parsed(server):
    report = load.run(server.url + "/mixed?q=1", load.constant(400, requests=100), method="POST", body=b"{}",
                      headers=["Authorization: Bearer t"])
    ids = [rid for rid, *_ in server.seen]
    assert len(ids) == len(set(ids)) == 100
    assert set(ids) == {f"{report.run_id}-{n}" for n in range(1, 101)}
    assert {(method, path, body) for _, method, path, body, _ in server.seen} == {("POST", "/mixed?q=1", b"{}")}
    assert all(headers["Authorization"] == "Bearer t" for *_, headers in server.seen)
    assert report.scheduled == report.sent == report.responses == 100
    assert report.statuses == {200: 90, 503: 10}
    assert report.errors == {"http 503": 10}
    chunked = sum(n + 2 + 7 for n in range(1, 101, 2))
    plain = sum(n for n in range(2, 101, 2) if n % 10)
    assert report.body_bytes == chunked + plain + 10 * len(b"busy")
    assert report.lateness_ms["p50"] <= report.lateness_ms["max"]
    assert set(report.latency_ms) == {"p50", "p90", "p99", "p999", "max"}


def test_each_request_carries_a_w3c_traceparent_named_after_its_id_unless_a_header_gives_one(server):
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from loadprobe.schema import trace_id_of

    load.run(server.url + "/ok", load.constant(400, requests=20))
    assert len(server.seen) == 20
    for rid, *_, headers in server.seen:
        # as an OpenTelemetry-instrumented server reads it: a remote, sampled parent in the trace named by the id
        context = get_current_span(TraceContextTextMapPropagator().extract(headers)).get_span_context()
        assert context.is_valid and context.is_remote and context.trace_flags.sampled
        assert f"{context.trace_id:032x}" == trace_id_of(rid)
        assert context.span_id == int(rid.rsplit("-", 1)[1])
    server.seen.clear()
    load.run(server.url + "/ok", load.constant(400, requests=5), headers=["traceparent: 00-" + "ab" * 16 + "-" +
                                                                         "cd" * 8 + "-00"])
    assert {h["traceparent"] for *_, h in server.seen} == {"00-" + "ab" * 16 + "-" + "cd" * 8 + "-00"}


def test_a_stalling_server_shows_growing_latency_while_sends_stay_on_schedule(server, tmp_path):
    # Capacity 1 / 20 ms = 50 req/s, offered 300 req/s: the backlog grows with every request.
    # (Sending takes 0.2 s, serving 1.2 s: wide margins against a busy machine's hiccups.)
    server.service_s = 0.02
    report = load.run(server.url + "/slow", load.constant(300, requests=60), connections=100,
                      record=str(tmp_path / "rec"))
    assert report.responses == len(server.seen) == 60
    spans = sorted(spans_in(tmp_path / "rec"), key=lambda s: s["ts_ns"])  # ts: intended; dur: latency from it
    latency = np.array([s["dur_ns"] for s in spans])
    sent = np.array([s["ts_ns"] + s["queue_ns"] for s in spans])
    answered = np.array([s["ts_ns"] + s["dur_ns"] for s in spans])
    # Latency grows with the backlog: the last requests waited behind all the earlier ones.
    assert latency[-10:].mean() > 5 * latency[:10].mean()
    # ... while every request still went out on schedule, long before the server got to it.
    assert sent.max() - sent.min() < (answered.max() - sent.min()) / 2
    assert max(s["queue_ns"] for s in spans) < latency[-10:].mean() / 5  # ~1 ms idle, 150 ms with 2 busy cores
    # A closed loop against the same server sees only the service time: the backlog is hidden.
    closed = load.run(server.url + "/slow", concurrency=1, requests=10)
    assert closed.latency_ms["max"] < report.latency_ms["max"] / 4


def test_the_connection_cap_holds_and_waiting_for_a_connection_shows_as_lateness(server):
    report = load.run(server.url + "/slow", load.constant(200, requests=20), connections=2)
    assert report.responses == 20
    assert len(server.peers) <= 2  # client ports: never more than two connections
    # The server answers one request per 10 ms, one is due every 5 ms: the queue of requests
    # waiting for a free connection grows, and that wait is reported as lateness, not hidden.
    assert report.lateness_ms["p50"] > server.service_s * 1000
    assert report.latency_ms["p50"] > report.lateness_ms["p50"]


def test_timeouts_and_dropped_connections_are_counted_by_kind(server):
    report = load.run(server.url + "/hang", load.constant(200, requests=20), timeout=0.2)
    assert report.errors == {"timeout": 10}
    assert report.responses == 10
    dropped = load.run(server.url + "/drop", load.constant(200, requests=20))
    assert dropped.errors == {"connection closed by the server": 4}
    assert dropped.responses == 16
    reset = load.run(server.url + "/reset", load.constant(200, requests=20))
    assert reset.errors == {"connection reset by peer": 4}  # the word "connection" once


def test_closed_loop_keeps_n_requests_in_flight(server):
    report = load.run(server.url + "/mixed", concurrency=3, requests=30)
    assert report.sent == report.responses == len(server.seen) == 30
    assert report.scheduled is None and report.lateness_ms is None
    assert report.mode == "closed loop"


def test_record_writes_client_spans_that_analyze_reads_and_that_join_the_server_ids(server, tmp_path):
    out = tmp_path / "client"
    report = load.run(server.url + "/mixed", load.poisson(300, requests=80, seed=2), record=str(out))
    assert loadprobe.current() is None
    portrait = loadprobe.analyze([out])
    assert portrait.requests.count == 80
    assert portrait.stage("client").count == 80
    spans = spans_in(out)
    assert {s["request_id"] for s in spans} == {rid for rid, *_ in server.seen}
    assert {s["status"] for s in spans} == {"ok", "error"}  # the 503s
    assert all(s["parent_id"] is None and s["queue_ns"] >= 0 for s in spans)
    # The recorded spans replay as the same schedule.
    assert len(load.arrivals(out)) == report.sent


def test_connection_refused_and_bad_urls_are_one_line_errors(server):
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    with pytest.raises(LoadprobeError, match=rf"cannot connect to 127.0.0.1:{port} .*\(Connection refused\); "
                                             "is the server running"):
        load.run(f"http://127.0.0.1:{port}/", [0.0])
    with pytest.raises(LoadprobeError, match=r"URL 'localhost:8000': expected http://HOST\[:PORT\]/PATH"):
        load.run("localhost:8000", [0.0])
    with pytest.raises(LoadprobeError, match=r"https is not supported"):
        load.run("https://127.0.0.1/", [0.0])
    with pytest.raises(LoadprobeError, match=r"the port is not a number"):
        load.run("http://127.0.0.1:99999/", [0.0])
    with pytest.raises(LoadprobeError, match=r"--header 'nocolon': expected NAME:VALUE"):
        load.run("http://127.0.0.1/", [0.0], headers=["nocolon"])


# -- the command line -----------------------------------------------------------------------------


def cli(*args: str):
    """``loadprobe load`` through the real group class (one-line errors, exit 2)."""
    group = _Group("loadprobe")
    group.add_command(cli_load.load)
    return CliRunner().invoke(group, list(args))


def test_cli_prints_the_report_and_json(server):
    done = cli("load", server.url + "/mixed", "--rate", "500", "--requests", "40", "--max-failed", "0.1")
    assert done.exit_code == 0, done.output
    assert re.search(r"sent +40 of 40 scheduled", done.stdout)
    assert "lateness  p50" in done.stdout and "errors    http 503: 4" in done.stdout
    done = cli("load", server.url + "/mixed", "--poisson", "--rate", "500", "--requests", "40", "--seed", "5", "--json",
               "--max-failed", "0.1")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["seed"] == 5 and report["sent"] == 40 and report["errors"] == {"http 503": 4}
    assert set(report["lateness_ms"]) == {"p50", "p99", "max"}


def test_cli_exits_1_with_its_summary_when_more_than_max_failed_of_the_requests_failed(server):
    done = cli("load", server.url + "/mixed", "--rate", "500", "--requests", "40")  # 1 in 10 answers 503
    assert done.exit_code == 1
    assert re.search(r"sent +40 of 40 scheduled", done.stdout)  # the summary comes first
    assert "4 of 40 requests failed (4 answered 503), more than --max-failed 0.01" in done.stderr
    done = cli("load", server.url + "/hang", "--rate", "200", "--requests", "20", "--timeout", "0.2")
    assert done.exit_code == 1 and "10 of 20 requests failed (10 timeout)" in done.stderr, done.output


def test_ctrl_c_prints_what_was_sent_and_keeps_what_finished(server, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    proc = subprocess.Popen([sys.executable, "-m", "loadprobe", "load", server.url + "/ok", "--rate", "100",
                             "--duration", "60", "--record", str(tmp_path / "client")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(server.seen) < 50 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Aborted" not in err and "Traceback" not in err
    assert "interrupted: the figures below are the requests that finished" in out
    sent = int(re.search(r"interrupted after ([\d,]+) requests were sent", err).group(1).replace(",", ""))
    assert sent >= 50 and f"every request that finished is recorded in {tmp_path / 'client'}" in err
    recorded = [s for s in spans_in(tmp_path / "client") if s["stage"] == "client"]
    assert sent - 2 <= len(recorded) <= sent  # at most the requests in flight at the Ctrl-C are not kept


def test_cli_replays_a_trace_faster_with_a_body_file_and_records(server, tmp_path):
    body = tmp_path / "req.json"
    body.write_text('{"prompt": "hi"}')
    done = cli("load", server.url + "/ok", "--replay", str(AZURE_CODE), "--speed", "50", "--requests", "60",
               "--body-file", str(body), "--record", str(tmp_path / "rec"), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["sent"] == 60
    assert {(m, b) for _, m, _, b, _ in server.seen} == {("POST", b'{"prompt": "hi"}')}
    assert loadprobe.analyze([tmp_path / "rec"]).requests.count == 60


@pytest.mark.parametrize("args, message", [
    (["--rate", "0"], "--rate 0 must be a positive number"),
    (["--rate", "-3", "--poisson"], "--rate -3 must be a positive number"),
    ([], "how fast? give --rate R (requests per second), --replay SOURCE or --concurrency N"),
    (["--bursty"], "--bursty needs --burst-rate R (requests per second during a burst)"),
    (["--rate", "5", "--concurrency", "2"], "--rate does not apply to --concurrency; leave it out"),
    (["--poisson", "--rate", "5", "--concurrency", "2"], "--poisson and --concurrency are different ways to send; "
                                                         "choose one"),
    (["--replay", "missing.csv"], "missing.csv: no such file; give the path of a CSV or JSONL log"),
    (["--rate", "5", "--body", "a", "--body-file", "b"], "give --body or --body-file, not both"),
    (["--rate", "5", "--ts-unit", "ms", "--speed", "2"], "--speed, --ts-unit only apply to --replay; leave them out "
                                                         "or add --replay"),
    (["--poisson", "--rate", "5", "--peak-to-mean", "3"], "--peak-to-mean only applies to --diurnal; leave it out or "
                                                          "add --diurnal"),
])
def test_cli_bad_input_exits_2_with_one_line(args, message, server):
    done = cli("load", server.url, *args)
    assert done.exit_code == 2, done.output
    assert done.stderr.splitlines() == [f"loadprobe: error: {message}"]
    assert not server.seen


def test_cli_trace_without_timestamps_and_refused_connection_exit_2(tmp_path, server):
    no_time = tmp_path / "log.csv"
    no_time.write_text("route\n/a\n")
    done = cli("load", server.url, "--replay", str(no_time))
    assert done.exit_code == 2
    assert done.stderr.startswith(f"loadprobe: error: {no_time}: which column holds the request's start time?")
    port = server.server_address[1]
    server.shutdown()
    server.server_close()  # nothing listens there now
    done = cli("load", server.url, "--rate", "10", "--requests", "1")
    assert done.exit_code == 2
    assert done.stderr.splitlines() == [f"loadprobe: error: cannot connect to 127.0.0.1:{port} for {server.url} "
                                        "(Connection refused); is the server running and the URL right?"]


def test_cli_choices_match_the_importer():
    from loadprobe.record import importer

    options = {p.name: p for p in cli_load.load.params}
    assert list(options["preset"].type.choices) == sorted(importer.PRESETS)
    assert list(options["ts_unit"].type.choices) == list(importer.UNITS)
    assert cli_import._PRESETS == list(options["preset"].type.choices)


def test_several_bodies_are_sent_in_turn():
    import http.server
    import threading

    seen = []

    class Echo(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            seen.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        report = load.run(f"http://127.0.0.1:{server.server_port}/x", load.constant(50, requests=6), method="POST",
                          body=[b"one", b"three", "five"])
    finally:
        server.shutdown()
        server.server_close()
    assert report.responses == 6
    assert sorted(seen) == sorted([b"one", b"three", b"five"] * 2)
