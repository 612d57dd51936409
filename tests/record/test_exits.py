"""Every process's spans land on every orderly exit: multiprocessing's children (fork,
forkserver, spawn; Process and Pool, closed or terminated) and plain processes ended by a
signal. Real interpreters, real signals, counted on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import spans_in

MP_SCRIPT = textwrap.dedent("""
    import json, multiprocessing as mp, os, sys
    import loadprobe
    from loadprobe import probe

    @probe("task")
    def task(i):
        return i

    def child(n):
        for i in range(n):
            task(i)

    def pool_item(n):
        child(n)
        return os.getpid()

    if __name__ == "__main__":
        method, kind, out = sys.argv[1:4]
        ctx = mp.get_context(method)
        if not os.environ.get("LOADPROBE_DIR"):
            loadprobe.start(out, service="mp", sample_devices=False)
        if kind == "process":        # short children: they end long before a flush interval
            procs = [ctx.Process(target=child, args=(5000,)) for _ in range(3)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            print(json.dumps([p.exitcode for p in procs]))
        elif kind == "pool-terminate":
            with ctx.Pool(2) as pool:  # __exit__ terminates: SIGTERM to the workers
                print(json.dumps(pool.map(pool_item, [1000] * 12)))
        else:
            pool = ctx.Pool(2)
            print(json.dumps(pool.map(pool_item, [1000] * 12)))
            pool.close()
            pool.join()
""")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    env.update(extra)
    return env


def _service_runs(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in out.glob("*/mp/*/run.json")]


@pytest.mark.parametrize("kind", ["process", "pool-terminate", "pool-close"])
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_multiprocessing_children_write_every_span(tmp_path, method, kind):
    """Issue #19.2: fork children leave through os._exit, so atexit never ran: short children
    recorded nothing. fork children inherit the parent's start(); forkserver and spawn children
    record from LOADPROBE_DIR (as under `loadprobe record`)."""
    script = tmp_path / "mpscript.py"
    script.write_text(MP_SCRIPT)
    out = tmp_path / "data"
    env = _env() if method == "fork" else _env(LOADPROBE_DIR=str(out), LOADPROBE_SERVICE="mp",
                                               LOADPROBE_SAMPLE_DEVICES="0")
    done = subprocess.run([sys.executable, str(script), method, kind, str(out)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = 15_000 if kind == "process" else 12_000
    rows = spans_in(out)
    assert len(rows) == expected and {r["stage"] for r in rows} == {"task"}
    assert not list(out.rglob(".spans-*"))  # every run finished its files
    for info in _service_runs(out):
        counters = info["counters"]
        assert info["stopped_ns"] is not None, info["pid"]
        assert counters["spans_written"] == counters["spans_recorded"]
        assert counters["spans_lost"] == counters["spans_dropped"] == 0


def test_sigterm_without_a_handler_still_writes_the_last_interval(tmp_path):
    """A process with the default SIGTERM disposition (no server, no handler of its own) used to
    die in the kernel with its last flush interval in memory; now it flushes, then dies of the
    same signal, so its parent sees the usual -SIGTERM."""
    code = textwrap.dedent(f"""
        import sys, loadprobe
        from loadprobe import probe
        @probe("tick")
        def tick(i):
            return i
        loadprobe.start({str(tmp_path)!r}, service="term", sample_devices=False, flush_interval_s=3600)
        for i in range(20_000):
            tick(i)
        print("ready", flush=True)
        sys.stdin.read()     # wait for the signal
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err
    assert len(spans_in(tmp_path)) == 20_000
    (run_json,) = tmp_path.glob("*/term/*/run.json")
    info = json.loads(run_json.read_text())
    assert info["stopped_ns"] is not None and info["counters"]["spans_written"] == 20_000


@pytest.mark.parametrize("where", ["atexit", "finalizer"])
def test_a_signal_during_the_last_stop_lets_it_finish(tmp_path, where):
    """The CI failure behind Pool.terminate(): a worker leaving normally was in its finalizer's
    stop when the pool's SIGTERM came; the handler, running on top of that stop, waited 10 s for
    a flusher nobody had told to stop, then died with the spans in memory. The signal is placed
    at the start of the stop here, the worst moment, by the hook the stop calls first."""
    code = textwrap.dedent(f"""
        import os, signal, sys, loadprobe
        from loadprobe import probe
        from loadprobe.record import probe as _probe
        @probe("tick")
        def tick(i):
            return i
        loadprobe.start({str(tmp_path)!r}, service="late", sample_devices=False, flush_interval_s=3600)
        for i in range(20_000):
            tick(i)
        deactivate = _probe.deactivate
        def signalled_deactivate():
            os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next line
            deactivate()
        _probe.deactivate = signalled_deactivate
        if {where!r} == "finalizer":
            from loadprobe.record import exits as _exit
            _exit.stop_recorder()  # what multiprocessing's last finalizer calls
            print("survived the signal", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "survived" not in done.stdout  # the signal is delivered when the stop ends
    assert len(spans_in(tmp_path)) == 20_000
    (run_json,) = tmp_path.glob("*/late/*/run.json")
    info = json.loads(run_json.read_text())
    assert info["stopped_ns"] is not None and info["counters"]["spans_written"] == 20_000


def test_a_handler_the_host_installed_is_kept(tmp_path):
    code = textwrap.dedent(f"""
        import signal, loadprobe
        mine = lambda signum, frame: None
        signal.signal(signal.SIGTERM, mine)
        loadprobe.start({str(tmp_path)!r}, sample_devices=False)
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C still raises
        loadprobe.stop()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
