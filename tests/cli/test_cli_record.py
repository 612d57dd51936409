"""``loadprobe record`` runs a real command as a real subprocess, with real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ..conftest import samples_in, spans_in

SERVICE = textwrap.dedent("""
    import sys, time
    from loadprobe import probe, request
    @probe("work")
    def work():
        time.sleep(0.002)
    for _ in range(int(sys.argv[1])):
        with request():
            work()
    sys.exit(int(sys.argv[2]))
""")


def loadprobe_cli(*args, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    return subprocess.run([sys.executable, "-m", "loadprobe", *args], capture_output=True, text=True,
                          env=env, timeout=120, **kwargs)


def test_record_runs_the_command_records_spans_and_samples_and_keeps_its_exit_code(tmp_path):
    script = tmp_path / "svc.py"
    script.write_text(SERVICE)
    out = tmp_path / "data"
    done = loadprobe_cli("record", "--output", str(out), "--sample-interval", "0.05", "--tag", "build=3",
                         "--", sys.executable, str(script), "150", "3")
    assert done.returncode == 3, done.stderr
    assert "recorded 300 spans from 1 process(es)" in done.stderr
    runs = {json.loads(p.read_text())["role"]: p.parent for p in out.glob("*/svc/*/run.json")}
    assert set(runs) == {"service", "supervisor"}
    assert len(spans_in(runs["service"])) == 300
    devices = {s["device"] for s in samples_in(runs["supervisor"])}
    assert {"cpu", "memory", "process"} <= devices
    info = json.loads((runs["supervisor"] / "run.json").read_text())
    assert info["tags"] == {"build": "3"}
    # The supervisor samples the devices; each process only its own interpreter.
    service = json.loads((runs["service"] / "run.json").read_text())
    assert {s["device"] for s in samples_in(runs["service"])} <= {f"interpreter:{service['pid']}"}


def test_sigterm_is_forwarded_to_the_command(tmp_path):
    script = tmp_path / "waiter.py"
    script.write_text(textwrap.dedent("""
        import signal, sys, time
        from loadprobe import probe
        def bye(signum, frame):
            print("got", signum, flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        @probe("tick")
        def tick():
            time.sleep(0.01)
        print("ready", flush=True)
        while True:
            tick()
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    proc = subprocess.Popen([sys.executable, "-m", "loadprobe", "record", "-o", str(tmp_path / "d"), "--",
                             sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    while not spans_in(tmp_path / "d", include_streams=True) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the command's recorder has flushed once
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"got {int(signal.SIGTERM)}" in out
    assert spans_in(tmp_path / "d")  # the command's atexit finished its files


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_command_ends_when_the_supervisor_is_killed_outright(tmp_path):
    """``kill -9`` of ``loadprobe record`` forwards nothing: the command gets a SIGTERM from the kernel instead of
    running on, unrecorded, holding its port."""
    import psutil

    script = tmp_path / "stays.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: (print("term", flush=True), sys.exit(0)))
        print(os.getpid(), flush=True)
        time.sleep(120)
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    proc = subprocess.Popen([sys.executable, "-m", "loadprobe", "record", "-o", str(tmp_path / "d"), "--no-devices",
                             "--", sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    child = psutil.Process(int(proc.stdout.readline()))
    proc.kill()
    proc.wait(timeout=30)
    try:
        child.wait(timeout=30)  # reaped by whoever adopted it
    except psutil.TimeoutExpired:
        pass
    gone = not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    if not gone:
        child.kill()
    out, _ = proc.communicate(timeout=30)  # the pipes' last writer has ended
    assert gone
    assert out.strip() == "term"  # it ended by the SIGTERM, its handler ran


def test_a_command_killed_by_a_signal_exits_128_plus_the_signal(tmp_path):
    done = loadprobe_cli("record", "-o", str(tmp_path), "--no-devices", "--", sys.executable, "-c",
                         "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode == 128 + signal.SIGKILL
    assert "no process recorded spans" in done.stderr


def test_bad_usage_is_one_line_and_exit_2(tmp_path):
    for args, expected in [
        (["record"], "no command given"),
        (["record", "--", "definitely-not-a-program"], "command not found"),
        (["record", "--tag", "oops", "--", "true"], "not KEY=VALUE"),
    ]:
        done = loadprobe_cli(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_debug_shows_the_traceback(tmp_path):
    done = loadprobe_cli("--debug", "record", cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_service_name_is_taken_from_the_command():
    from loadprobe.cli.record import service_name

    assert service_name(["python3", "serve.py", "--port", "1"]) == "serve"
    assert service_name(["python", "-m", "app.main"]) == "main"
    assert service_name(["/usr/bin/gunicorn", "app:app"]) == "gunicorn"
