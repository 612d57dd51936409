"""Real servers (gunicorn's sync, gthread and uvicorn workers; uvicorn alone and with --workers)
record every request on 127.0.0.1 until an orderly stop, whatever signal ends them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from ..conftest import spans_in

pytest.importorskip("gunicorn")
pytest.importorskip("uvicorn")

ASGI_APP = textwrap.dedent("""
    from fastapi import FastAPI
    from loadprobe import probe
    from loadprobe.instrumentation.asgi import LoadprobeMiddleware

    app = FastAPI()
    if MIDDLEWARE:
        app.add_middleware(LoadprobeMiddleware)

    @probe("work")
    def work(i):
        return i * 2

    @app.get("/health")
    def health():
        return {"ok": True}

    @app.get("/work/{i}")
    async def do(i: int):
        return {"v": work(i)}
""")

WSGI_APP = textwrap.dedent("""
    from loadprobe import probe
    from loadprobe.instrumentation.wsgi import LoadprobeWSGIMiddleware

    @probe("work")
    def work(i):
        return i * 2

    def plain(environ, start_response):
        path = environ["PATH_INFO"]
        if path.startswith("/work/"):
            work(int(path.rsplit("/", 1)[1]))
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    app = LoadprobeWSGIMiddleware(plain, route=lambda environ: environ["PATH_INFO"].split("/")[1])
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()
        return response.status


def _wait_ready(proc: subprocess.Popen, port: int, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            if _get(f"http://127.0.0.1:{port}/health") == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"server did not come up (exit {proc.returncode}): {err[-3000:]}")
        time.sleep(0.1)


def serve_and_stop(tmp_path: Path, command: list[str], *, app: str, middleware: bool = True,
                   requests: int = 200, sig: int = signal.SIGTERM, record: bool = False) -> Path:
    """Run ``command`` (with ``{port}`` filled in) serving ``app`` from tmp_path, send ``requests``
    requests to /work/<i> after /health answers, end it with ``sig``; returns the data directory."""
    (tmp_path / "svcapp.py").write_text(f"MIDDLEWARE = {middleware}\n" + app)
    out = tmp_path / "data"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    argv = [part.format(port=port) for part in command]
    if record:
        argv = [sys.executable, "-m", "loadprobe", "record", "--no-devices", "-o", str(out), "--", *argv]
    else:
        env.update(LOADPROBE_DIR=str(out), LOADPROBE_SAMPLE_DEVICES="0")
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_ready(proc, port)
        for i in range(requests):
            assert _get(f"http://127.0.0.1:{port}/work/{i}") == 200
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err, err[-3000:]
    return out


def assert_all_landed(out: Path, requests: int, *, http_spans: bool = True) -> list[dict]:
    """Every request's spans are in finished files and every service run stopped cleanly."""
    rows = spans_in(out)
    work = [r for r in rows if r["stage"] == "work"]
    assert len(work) == requests
    if http_spans:
        assert sum(r["stage"].startswith("GET ") for r in rows) >= requests  # + the /health polls
    runs = [json.loads(p.read_text()) for p in out.glob("*/*/*/run.json")]
    service_runs = [r for r in runs if r["role"] == "service" and r["counters"]["spans_recorded"]]
    assert service_runs
    for info in service_runs:
        counters = info["counters"]
        assert info["stopped_ns"] is not None, info["pid"]
        assert counters["spans_lost"] == counters["spans_dropped"] == counters["spans_pending"] == 0
        assert counters["spans_written"] == counters["spans_recorded"]
    assert sum(r["counters"]["spans_written"] for r in service_runs) == len(rows)
    assert not list(out.rglob(".spans-*"))  # no unfinished stream anywhere
    return service_runs


GUNICORN = [sys.executable, "-m", "gunicorn", "-b", "127.0.0.1:{port}", "--graceful-timeout", "20"]


@pytest.mark.parametrize("record", [False, True], ids=["LOADPROBE_DIR", "loadprobe-record"])
def test_gunicorn_uvicorn_workers_write_every_request_at_sigterm(tmp_path, record):
    """Issue #19.1: 2 uvicorn workers under gunicorn, SIGTERM: they used to leave run.json with
    stopped_ns null and no spans (uvicorn re-raises SIGTERM with the default action after its
    graceful shutdown, so atexit never ran)."""
    out = serve_and_stop(tmp_path, GUNICORN + ["-w", "2", "-k", "uvicorn.workers.UvicornWorker", "svcapp:app"],
                         app=ASGI_APP, record=record)
    runs = assert_all_landed(out, 200)
    assert all(r["forked_from"] is None for r in runs)  # each worker started its own run


def test_gunicorn_uvicorn_workers_with_probes_only_keep_their_spans(tmp_path):
    """No middleware, so no lifespan hook: the SIGTERM handler installed at import does it."""
    out = serve_and_stop(tmp_path, GUNICORN + ["-w", "2", "-k", "uvicorn.workers.UvicornWorker", "svcapp:app"],
                         app=ASGI_APP, middleware=False)
    assert_all_landed(out, 200, http_spans=False)


def test_gunicorn_sync_workers_restarted_by_max_requests_write_everything(tmp_path):
    out = serve_and_stop(tmp_path, GUNICORN + ["-w", "2", "--max-requests", "40", "svcapp:app"],
                         app=WSGI_APP, requests=150)
    runs = assert_all_landed(out, 150, http_spans=False)
    assert len(runs) >= 4  # 150 requests at 40 per worker: restarted workers, each its own run


def test_gunicorn_gthread_workers_write_everything_at_sigint(tmp_path):
    out = serve_and_stop(tmp_path, GUNICORN + ["-w", "2", "-k", "gthread", "--threads", "4", "svcapp:app"],
                         app=WSGI_APP, sig=signal.SIGINT)
    assert_all_landed(out, 200, http_spans=False)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_uvicorn_alone_writes_everything(tmp_path, sig):
    out = serve_and_stop(tmp_path, [sys.executable, "-m", "uvicorn", "--port", "{port}", "svcapp:app"],
                         app=ASGI_APP, sig=sig)
    assert_all_landed(out, 200)


def test_uvicorn_with_workers_writes_every_worker(tmp_path):
    out = serve_and_stop(tmp_path, [sys.executable, "-m", "uvicorn", "--port", "{port}", "--workers", "2",
                                    "svcapp:app"], app=ASGI_APP)
    assert_all_landed(out, 200)


def test_each_worker_process_samples_its_interpreter(tmp_path):
    """Issue #32: under ``loadprobe record`` every uvicorn worker writes its own ``interpreter:<pid>`` CPU (the
    supervisor samples the devices), and the plan reads them as the service's interpreter bound."""
    import pyarrow.parquet as pq

    import loadprobe
    from loadprobe.plan.context import interpreter

    out = serve_and_stop(tmp_path, [sys.executable, "-m", "uvicorn", "--port", "{port}", "--workers", "2",
                                    "svcapp:app"], app=ASGI_APP, record=True, requests=300)
    runs = assert_all_landed(out, 300)
    devices = {row["device"] for path in out.rglob("samples-*.parquet") for row in pq.read_table(path).to_pylist()}
    workers = {f"interpreter:{r['pid']}" for r in runs}
    assert len(workers) == 2 and workers <= devices
    python = interpreter(loadprobe.analyze([str(out)]))
    assert python is not None and python.processes in (1, 2) and python.ms > 0
