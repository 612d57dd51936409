"""Shared fixtures: a real recorder writing real files into a temporary directory.

The tests exercise the *installed* loadprobe. Run from a clone's root, ``python -m pytest`` and
pytest's own rootdir entry would put the source folder first on sys.path, and ``./loadprobe``
is not the installed package: ``loadprobe.samples``, ``.instrumentation`` and ``.reports`` are
mapped from other folders, and the compiled kernel is built into the install. So the clone's
root leaves sys.path before loadprobe is imported, and PYTHONSAFEPATH keeps it out of every
Python the tests start (an editable install maps the package to the source anyway).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO]
os.environ["PYTHONSAFEPATH"] = "1"
# A run started in the background (`&` in a script, nohup) inherits SIGINT ignored, and every
# process the tests start would too: Ctrl-C tests need it as an interactive shell leaves it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

import loadprobe  # noqa: E402
from loadprobe.record import probe as _probe  # noqa: E402
from loadprobe.record.segments import read_stream  # noqa: E402


@pytest.fixture
def recorder(tmp_path):
    """A recorder with a short flush interval, stopped (and its files finished) after the test."""
    rec = loadprobe.start(tmp_path / "data", service="test", sample_devices=False, flush_interval_s=0.05)
    yield rec
    loadprobe.stop()


@pytest.fixture(autouse=True)
def _no_recorder_leaks():
    yield
    if loadprobe.current() is not None:
        loadprobe.stop()
    assert not _probe._active


def spans_in(path: Path, *, include_streams: bool = False) -> list[dict]:
    """Every span row under ``path`` (finished Parquet files; optionally live streams too).

    A stream whose Parquet file is already there is skipped, as analysis skips it: a kill between
    a rotation's rename and its delete leaves both, and recovery deletes the stream."""
    finished = sorted(Path(path).rglob("spans-*.parquet"))
    tables = [pq.read_table(p) for p in finished]
    if include_streams:
        done = {p.with_suffix("").name for p in finished}
        tables += [read_stream(p) for p in sorted(Path(path).rglob(".spans-*.arrows"))
                   if p.name[1:].removesuffix(".arrows") not in done]
    rows: list[dict] = []
    for table in tables:
        rows += table.to_pylist()
    return rows


def samples_in(path: Path) -> list[dict]:
    rows: list[dict] = []
    for p in sorted(Path(path).rglob("samples-*.parquet")):
        rows += pq.read_table(p).to_pylist()
    return rows


def stopped_spans(rec) -> list[dict]:
    """Stop ``rec`` (finishing its files) and return what it wrote."""
    loadprobe.stop()
    return spans_in(rec.run_dir)


def run_python(code: str, *, env: dict | None = None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with this checkout importable."""
    full_env = dict(os.environ)
    full_env.pop("LOADPROBE_DIR", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, timeout=timeout,
                          capture_output=True, text=True, **kwargs)


def record_and_crash(out: Path, requests: int) -> None:
    """A real process records ``requests`` one-span requests into ``out`` (service "svc"),
    flushes, and dies without stopping: its segment stays an unfinished stream."""
    code = f"""
import os, loadprobe
from loadprobe import probe, request
@probe("x")
def x():
    pass
loadprobe.start({str(out)!r}, service="svc", sample_devices=False)
for _ in range({requests}):
    with request():
        x()
loadprobe.flush()
os._exit(0)
"""
    assert run_python(code).returncode == 0


HOSTILE_NAMES = ("<img src=x onerror=alert(1)>", "</script><script>alert(2)</script>", "\"'><svg onload=alert(3)>",
                 "a&amp;b <!-- c")


def record_hostile_service(out: Path) -> Path:
    """A real recording whose stage, engine and service names are HTML/script injection probes."""
    rec = loadprobe.start(out, service="svc<b onmouseover=alert(4)>", sample_devices=False, flush_interval_s=0.05)
    base = 1_000_000
    for i in range(40):
        with loadprobe.request():
            for j, name in enumerate(HOSTILE_NAMES):
                start = time.perf_counter_ns()
                loadprobe.record_span(name, start, start + base * (j + 1) + i * 1000, batch=1 + i % 3,
                                      engine="<i>npu</i>", shape=(i % 5 + 1, 4))
    loadprobe.stop()
    return rec.run_dir


def by_stage(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["stage"], []).append(row)
    return out


__all__ = ["HOSTILE_NAMES", "REPO", "by_stage", "pa", "record_and_crash", "record_hostile_service", "run_python",
           "samples_in", "spans_in", "stopped_spans"]
