"""The recorder: drains span buffers and device samples into one run directory per process.

One background thread (the flusher) converts what the probes buffered into Arrow batches
and appends them to segment files (``_segments.py``); another samples devices
(``_samplers.py``). The host's threads never wait for either: write errors are counted,
logged once and retried; past the memory cap spans are dropped and counted. Counters
land in run.json so analysis can report data loss honestly.

Usage::

    import loadprobe

    recorder = loadprobe.start("data/", service="vision")
    ...
    print(recorder.stats())
    loadprobe.stop()
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from time import perf_counter_ns

from . import env as _env, exits as _exit, inventory as _inventory, probe as _probe
from .._version import __version__

log = logging.getLogger("loadprobe")

RUN_SCHEMA = "run/1.0"
_CONVERT_ROWS = 1 << 14  # spans per Arrow batch: bounds the flusher's temporary memory
_YIELD_S = 50e-6  # the flusher sleeps this long between conversion slices (_tables.SLICE_ROWS)
# Up to this many spans per flush the flusher yields the GIL between slices, so a service's
# threads never wait behind it; above it (a flood far beyond any service's request rate) it
# converts at full speed instead, since each yield costs up to a 5 ms switch interval to win
# the GIL back from busy threads, and yielding would turn the flood into dropped spans.
_YIELD_BELOW_ROWS = 1 << 16


def _yield_gil() -> None:
    """Let a host thread waiting for the GIL take it now (sleep(0) would take it straight back)."""
    time.sleep(_YIELD_S)
_FLUSH_POLL_S = 0.05


@dataclass(frozen=True)
class RecorderStats:
    """Counters of one recorder; every span it was offered is in exactly one place::

        spans_recorded == spans_written + spans_dropped + spans_pending + spans_lost

    ``spans_recorded`` counts the spans probes finished while it recorded. ``spans_dropped``
    is the sum of its reasons: ``spans_dropped_cap`` (the memory cap was reached),
    ``spans_dropped_write`` (the disk refused them for longer than memory allowed to keep
    them) and ``spans_dropped_invalid`` (values the converter could not take).
    ``spans_pending`` are in memory, not yet written; at stop they become ``spans_lost``
    (unwritten when the recorder stopped: the disk refused the last write, or the flusher did
    not finish in time). Samples alike, with ``samples_lost``.
    """

    run_dir: str
    spans_recorded: int
    spans_dropped: int
    spans_written: int
    samples_written: int
    samples_dropped: int
    files: int
    write_errors: int
    extractor_errors: int
    invalid_values: int
    spans_dropped_cap: int = 0
    spans_dropped_write: int = 0
    spans_dropped_invalid: int = 0
    spans_pending: int = 0
    spans_lost: int = 0
    samples_lost: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


class Recorder:
    """Records this process's spans and, optionally, device samples into ``run_dir``.

    Create it through ``loadprobe.start()``; one recorder is active per process.
    ``record_spans=False`` and ``sampler_pids`` serve ``loadprobe record``, which only
    samples devices on behalf of the command it runs.
    """

    def __init__(
        self,
        output_dir: str | os.PathLike = "loadprobe-data",
        *,
        service: str | None = None,
        tags: dict | None = None,
        sample_devices: bool = True,
        sample_interval_s: float = 0.5,
        flush_interval_s: float = 1.0,
        max_buffered_spans: int = _probe.DEFAULT_MAX_BUFFERED_SPANS,
        rotate_interval_s: float = 60.0,
        rotate_bytes: int = 64 << 20,
        record_spans: bool = True,
        sampler_pids: list[int] | None = None,
        forked_from: str | None = None,
    ) -> None:
        for name, value in (("sample_interval_s", sample_interval_s), ("flush_interval_s", flush_interval_s),
                            ("rotate_interval_s", rotate_interval_s)):
            if not value > 0:
                raise ValueError(f"loadprobe.start: {name} must be > 0 seconds, got {value!r}")
        if max_buffered_spans < 1 or rotate_bytes < 1:
            raise ValueError("loadprobe.start: max_buffered_spans and rotate_bytes must be positive")
        self.output_dir = Path(output_dir)
        self.service = _safe_name(service or os.environ.get(_env.LOADPROBE_SERVICE) or _program_name())
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.sample_devices = sample_devices
        self.sample_interval_s = sample_interval_s
        self.flush_interval_s = flush_interval_s
        self.max_buffered_spans = max_buffered_spans
        self.rotate_interval_s = rotate_interval_s
        self.rotate_bytes = rotate_bytes
        self.record_spans = record_spans
        self.sampler_pids = sampler_pids
        self.forked_from = forked_from
        self.from_env = False  # started by LOADPROBE_DIR rather than by the program
        self.pid = os.getpid()
        self.started_ns = time.time_ns()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.started_ns / 1e9))
        self.run_id = f"{self.pid}-{stamp}.{self.started_ns // 1_000_000 % 1000:03d}Z"
        self.run_dir = self.output_dir / _inventory.host_name() / self.service / self.run_id
        self.stopped_ns: int | None = None
        self._spans_drained = 0
        self._write_errors = 0
        self._lost_rows: dict[str, int] = {}  # rows dropped while the disk refused them
        self._invalid_spans = 0  # spans the converter refused
        self._final = False  # set once the last flush ran (or stop gave up waiting): pending is lost
        self._warned: set[str] = set()
        self._pending: dict[str, list] = {"spans": [], "samples": []}
        self._writers: dict = {}
        self._converter = None
        self._sampler = None
        self._availability: dict = {}
        self._hardware: dict = {}
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._flush_cond = threading.Condition()
        self._flushes_done = 0
        self._flushes_asked = 0
        self._last_counters: tuple | None = None
        self._counter_base = (0, 0)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Recorder:
        """Set up samplers and the flusher thread, write run.json, start accepting spans."""
        from . import samplers as _samplers, segments as _segments, tables as _tables

        self._counter_base = _probe.counters()
        if self.record_spans:
            _probe.activate(self.max_buffered_spans)  # buffer from now; written once the flusher runs
        self._converter = _tables.SpanConverter(self.run_id)
        for kind in ("spans", "samples"):
            self._writers[kind] = _segments.SegmentWriter(
                self.run_dir, kind, rotate_bytes=self.rotate_bytes, rotate_interval_s=self.rotate_interval_s
            )
        sources = _samplers.default_sources(self.sampler_pids, include_children=self.sampler_pids is not None)
        self._availability = {s.name: s.availability() for s in sources}
        gpus = next((s.inventory() for s in sources if s.name == "nvml"), [])
        self._hardware = _inventory.hardware(gpus)
        if self.sample_devices:
            self._sampler = _samplers.Sampler(sources, self.sample_interval_s)
        else:
            for source in sources:
                if hasattr(source, "close"):
                    source.close()
        self._reserve_run_dir()
        self._write_run_json()
        self._thread = threading.Thread(target=self._run, name="loadprobe-flusher", daemon=True)
        self._thread.start()
        if self._sampler is not None:
            self._sampler.start()
        return self

    def flush(self, timeout: float = 10.0) -> bool:
        """Write everything buffered so far; True once it is on disk (or tried and counted)."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return False
        with self._flush_cond:
            self._flushes_asked += 1
            wanted = self._flushes_asked
            self._wake.set()
            return self._flush_cond.wait_for(lambda: self._flushes_done >= wanted, timeout)

    def stop(self, timeout: float = 10.0) -> RecorderStats:
        """Stop sampling and recording, write what is left, finish the files as Parquet."""
        with _stopping():
            return self._stop(timeout)

    def _stop(self, timeout: float) -> RecorderStats:
        global _current
        if _current is self:  # stopped directly: the next loadprobe.start() makes a new recorder
            _current = None
        if self.record_spans:
            _probe.deactivate()
        if self._sampler is not None:
            self._sampler.stop()
        self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        # Whatever the flusher has not written by now is lost, and counted so (a flusher still
        # stuck on a refusing disk may yet write some; its run.json then says so).
        self._final = True
        return self.stats()

    def stats(self) -> RecorderStats:
        """The counters now (while recording, ``spans_pending`` is what waits in memory)."""
        cap_dropped, extractor_errors = _probe.counters() if self.record_spans else (0, 0)
        cap_dropped -= self._counter_base[0]  # the process-wide counters, since this recorder started
        extractor_errors -= self._counter_base[1]
        buffered = _probe.buffered() if self.record_spans and not self._final else 0
        spans_writer = self._writers.get("spans")
        samples_writer = self._writers.get("samples")
        recorded = self._spans_drained + buffered + cap_dropped
        written = spans_writer.rows_written if spans_writer else 0
        write_dropped, invalid = self._lost("spans"), self._invalid_spans
        dropped = cap_dropped + write_dropped + invalid
        # Drained but not yet written: in the flusher's hands or waiting for the disk.
        in_memory = max(0, recorded - written - dropped)
        samples_in_memory = sum(b.num_rows for b in self._pending["samples"])
        return RecorderStats(
            run_dir=str(self.run_dir),
            spans_recorded=recorded,
            spans_dropped=dropped,
            spans_written=written,
            samples_written=samples_writer.rows_written if samples_writer else 0,
            samples_dropped=(self._sampler.dropped if self._sampler else 0) + self._lost("samples"),
            files=sum(w.files_written for w in self._writers.values()),
            write_errors=self._write_errors + sum(w.rotation_errors for w in self._writers.values()),
            extractor_errors=extractor_errors,
            invalid_values=self._converter.invalid_values if self._converter else 0,
            spans_dropped_cap=cap_dropped,
            spans_dropped_write=write_dropped,
            spans_dropped_invalid=invalid,
            spans_pending=0 if self._final else in_memory,
            spans_lost=in_memory if self._final else 0,
            samples_lost=samples_in_memory if self._final else 0,
        )

    # -- the flusher thread ----------------------------------------------------------

    def _run(self) -> None:
        self._recover_dead_runs()
        last = time.monotonic()
        early = max(1, self.max_buffered_spans // 2)
        while not self._stopping:
            self._wake.wait(_FLUSH_POLL_S)
            if self._stopping:
                break
            asked = self._wake.is_set()
            if asked or time.monotonic() - last >= self.flush_interval_s or (self.record_spans and _probe.buffered() >= early):
                self._wake.clear()
                self._flush_once()
                last = time.monotonic()
        self._flush_once()
        for writer in self._writers.values():
            writer.close()
        self._final = True  # what the last flush could not write is lost now, and counted
        self.stopped_ns = time.time_ns()
        self._write_run_json()
        self._notify_flushed()

    def _flush_once(self) -> None:
        done = self._flushes_asked
        try:
            offset = time.time_ns() - perf_counter_ns()
            if self.record_spans:
                rows = _probe.drain()
                self._spans_drained += len(rows)
                pause = _yield_gil if len(rows) <= _YIELD_BELOW_ROWS else None
                for at in range(0, len(rows), _CONVERT_ROWS):
                    chunk = rows[at:at + _CONVERT_ROWS]
                    try:
                        self._pending["spans"].append(self._converter.batch(chunk, offset, pause))
                    except Exception as exc:  # a value the converter cannot take: count the loss, go on
                        self._invalid_spans += len(chunk)
                        self._warn_once("convert", f"loadprobe: could not convert {len(chunk)} spans ({exc!r}); "
                                                   "they are counted as dropped")
                del rows
            if self._sampler is not None:
                samples = self._sampler.drain()
                if samples:
                    from .tables import samples_batch

                    self._pending["samples"].append(samples_batch(samples))
            for kind in self._pending:
                self._write_pending(kind)
            counters = tuple(self.stats().as_dict().values())
            if counters != self._last_counters:
                self._last_counters = counters
                self._write_run_json()
        except Exception as exc:  # a bug here must never reach the host; say it once
            self._warn_once("internal", f"loadprobe: flusher error, recording continues: {exc!r}")
        with self._flush_cond:
            self._flushes_done = max(self._flushes_done, done)
            self._flush_cond.notify_all()

    def _notify_flushed(self) -> None:
        with self._flush_cond:
            self._flushes_done = self._flushes_asked
            self._flush_cond.notify_all()

    def _write_pending(self, kind: str) -> None:
        pending, writer = self._pending[kind], self._writers[kind]
        try:
            while pending:
                writer.write(pending[0])
                pending.pop(0)
            writer.rotate_if_due()
        except OSError as exc:
            self._write_errors += 1
            self._warn_once("write", f"loadprobe: cannot write to {self.run_dir} ({exc}); "
                                     "keeping data in memory up to the cap and retrying")
        # Data the disk refused waits in memory, bounded like the buffers: oldest goes first.
        while sum(b.num_rows for b in pending) > self.max_buffered_spans and len(pending) > 1:
            self._lost_rows[kind] = self._lost_rows.get(kind, 0) + pending.pop(0).num_rows

    def _lost(self, kind: str) -> int:
        return self._lost_rows.get(kind, 0)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    # -- run directory and run.json ---------------------------------------------------

    def _reserve_run_dir(self) -> None:
        """Create a run directory nobody has used; never reuse one (nothing is overwritten)."""
        base, n = self.run_dir, 1
        while True:
            try:
                self.run_dir.parent.mkdir(parents=True, exist_ok=True)
                self.run_dir.mkdir()
                break
            except FileExistsError:
                n += 1
                self.run_dir = base.with_name(f"{base.name}-{n}")
            except OSError as exc:
                self._write_errors += 1
                self._warn_once("write", f"loadprobe: cannot create {self.run_dir} ({exc}); "
                                         "recording continues in memory up to the cap and keeps retrying")
                break
        for writer in self._writers.values():
            writer.directory = self.run_dir

    def run_info(self) -> dict:
        """The content of run.json."""
        proc_started = None
        try:
            import psutil

            proc_started = psutil.Process(self.pid).create_time()
        except Exception:
            pass
        return {
            "schema": RUN_SCHEMA,
            "loadprobe_version": __version__,
            "host": _inventory.host_name(),
            "service": self.service,
            "run_id": self.run_id,
            "pid": self.pid,
            "process_started": proc_started,
            "argv": list(sys.argv),
            "started_ns": self.started_ns,
            "stopped_ns": self.stopped_ns,
            "forked_from": self.forked_from,
            "tags": self.tags,
            "role": "service" if self.record_spans else "supervisor",
            "settings": {
                "sample_devices": self.sample_devices,
                "sample_interval_s": self.sample_interval_s,
                "flush_interval_s": self.flush_interval_s,
                "max_buffered_spans": self.max_buffered_spans,
                "rotate_interval_s": self.rotate_interval_s,
                "rotate_bytes": self.rotate_bytes,
            },
            "hardware": self._hardware,
            "samplers": self._availability if self.sample_devices else {},
            "counters": {k: v for k, v in self.stats().as_dict().items() if k != "run_dir"},
        }

    def _write_run_json(self) -> None:
        path = self.run_dir / "run.json"
        tmp = self.run_dir / ".run.json.tmp"
        try:
            tmp.write_bytes(_padded(self._run_json_bytes()))
            os.replace(tmp, path)  # our own metadata: replaced whole, never half-written
            return
        except OSError as exc:
            self._write_errors += 1
            self._warn_once("write", f"loadprobe: cannot write {path} ({exc}); recording continues")
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        # A full disk refuses a new file but not the blocks run.json already has: the padding
        # written above leaves room, so the counters (loss included) still reach the disk.
        data = self._run_json_bytes()
        try:
            with open(path, "r+b") as handle:
                size = os.fstat(handle.fileno()).st_size
                if len(data) <= size:
                    handle.write(data[:-1] + b" " * (size - len(data)) + b"\n")
        except OSError:
            pass  # no run.json at all, or not even that: analysis reports the counters unknown

    def _run_json_bytes(self) -> bytes:
        return (json.dumps(self.run_info(), indent=2, default=str) + "\n").encode("utf-8")

    def _recover_dead_runs(self) -> None:
        """Finish segments that crashed processes of this service left on this host."""
        from .segments import recover_run

        try:
            siblings = [p for p in self.run_dir.parent.iterdir() if p.is_dir() and p != self.run_dir]
        except OSError:
            return
        for run_dir in siblings:
            try:
                if run_is_dead(run_dir):
                    recover_run(run_dir)
            except Exception as exc:
                self._warn_once("recover", f"loadprobe: could not recover {run_dir}: {exc}")


def _padded(data: bytes) -> bytes:
    """run.json followed by spaces (valid JSON whitespace) to room for its later, longer versions."""
    size = -(-(len(data) + 1024) // 4096) * 4096
    return data[:-1] + b" " * (size - len(data)) + b"\n"


def run_is_dead(run_dir: Path) -> bool:
    """Whether the process that wrote ``run_dir`` on this host has ended (so its files are final)."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        pid = int(info["pid"])
        started = info.get("process_started")
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not ours to touch
    if info.get("host") != _inventory.host_name():
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        return started is not None and abs(proc.create_time() - float(started)) > 1.0  # pid reused
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _program_name() -> str:
    path = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    name = path.stem
    if name in ("__main__", "-c", ""):
        name = path.parent.name or "python"
    return name


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name)).strip(".") or "service"


# -- the process-wide recorder ---------------------------------------------------------

_current: Recorder | None = None
_lock = threading.Lock()
_hooks_installed = False
_inherited: list = []  # a forked child's copy of the parent's recorder: kept, never closed
_stopping_threads: dict[int, int] = {}  # thread -> how deep inside a stop it is now
_stops_done = threading.Event()  # set while no stop runs
_stops_done.set()


def start(output_dir: str | os.PathLike = "loadprobe-data", **options) -> Recorder:
    global _current
    with _lock:
        if _current is not None:
            if Path(output_dir) != _current.output_dir:
                log.warning("loadprobe: already recording into %s; start(%r) ignored", _current.output_dir, output_dir)
            return _current
        recorder = Recorder(output_dir, **options)
        _install_hooks()
        try:
            recorder.start()
        except BaseException:
            _probe.deactivate()
            raise
        _current = recorder
    _exit.register_multiprocessing_finalizer()  # a spawn/forkserver child leaves through os._exit
    return recorder


def stop() -> RecorderStats | None:
    global _current
    _env_start_done.wait(30)  # a recorder starting from the environment finishes first
    with _stopping():
        with _lock:
            recorder, _current = _current, None
        return recorder.stop() if recorder is not None else None


@contextlib.contextmanager
def _stopping():
    """Mark this thread as stopping: a fatal signal landing meanwhile lets the stop finish
    (see ``stop_for_exit``), and is delivered when it has."""
    me = threading.get_ident()
    _stopping_threads[me] = _stopping_threads.get(me, 0) + 1
    _stops_done.clear()
    try:
        yield
    finally:
        depth = _stopping_threads.pop(me, 1) - 1
        if depth:
            _stopping_threads[me] = depth
        else:
            if not _stopping_threads:
                _stops_done.set()
            _exit.deliver_deferred_signal()


def stop_for_exit(timeout: float) -> bool:
    """``stop()`` from a signal handler or a process's last finalizer, bounded in time.

    Returns False when the signal interrupted a stop on this very thread: that stop cannot go
    on until the handler returns, so the handler must defer the signal rather than wait. A stop
    under way on another thread is waited for; the interrupted code may hold ``_lock``.
    """
    global _current
    if threading.get_ident() in _stopping_threads:
        return False
    _env_start_done.wait(timeout)
    if _stopping_threads:  # another thread is stopping: dying now would cut its last flush short
        _stops_done.wait(timeout)
    with _stopping():
        locked = _lock.acquire(timeout=1.0)
        try:
            recorder, _current = _current, None
        finally:
            if locked:
                _lock.release()
        if recorder is not None:
            recorder.stop(timeout)
    return True


def stop_if_started_from_env() -> RecorderStats | None:
    """End the run at an app's shutdown (ASGI lifespan) if the environment started it.

    A later probe starts a new run (a test client may start the app again); a recorder the
    program started itself is only flushed: it is the program's to stop.
    """
    recorder = _current
    if recorder is None:
        return None
    if not recorder.from_env:
        recorder.flush()
        return None
    stats = stop()
    if os.environ.get(_env.LOADPROBE_DIR):
        _probe.rearm_env_start()
    return stats


def flush(timeout: float = 10.0) -> bool:
    recorder = _current
    return recorder.flush(timeout) if recorder is not None else False


def current() -> Recorder | None:
    return _current


def start_from_env() -> None:
    """Start recording as LOADPROBE_* variables say, without holding up the probe that asked.

    Spans are buffered from this moment on; the recorder itself (imports, samplers, files)
    starts on a background thread and writes them when ready. A failure is logged, never raised.
    """
    _install_hooks()  # now, so a short-lived program still finishes its files at exit
    _exit.install_signal_handlers()  # on the main thread only; the probe's thread may be it
    _exit.register_multiprocessing_finalizer()  # now: a short child may exit before the start ends
    _probe.activate(_probe.DEFAULT_MAX_BUFFERED_SPANS)
    _env_start_done.clear()
    try:
        # Not a daemon: an interpreter that exits at once waits for it, so atexit finds a recorder.
        threading.Thread(target=_start_from_env_now, name="loadprobe-start").start()
    except RuntimeError as exc:  # no new threads (interpreter shutting down)
        _probe.deactivate()
        _env_start_done.set()
        log.warning("loadprobe: could not start from %s: %s", _env.LOADPROBE_DIR, exc)


def _start_from_env_now() -> None:
    try:
        recorder = start(
            os.environ[_env.LOADPROBE_DIR],
            service=os.environ.get(_env.LOADPROBE_SERVICE),
            tags=_env.parse_tags(os.environ.get(_env.LOADPROBE_TAGS)),
            sample_devices=os.environ.get(_env.LOADPROBE_SAMPLE_DEVICES, "1") not in ("0", "false", "no"),
        )
        recorder.from_env = True
    except Exception as exc:
        _probe.deactivate()
        log.warning("loadprobe: could not start from %s: %s", _env.LOADPROBE_DIR, exc)
    finally:
        _env_start_done.set()


_env_start_done = threading.Event()
_env_start_done.set()


def _install_hooks() -> None:
    global _hooks_installed
    if not _hooks_installed:
        _hooks_installed = True
        atexit.register(stop)
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
    _exit.install_signal_handlers()  # each time: an earlier start may have run off the main thread


def _before_fork() -> None:
    """A fork during the environment start would leave the child half-imported modules: let the
    start finish first (a one-time wait of a fraction of a second, at a pre-forking server's start)."""
    if not _env_start_done.is_set() and threading.current_thread().name != "loadprobe-start":
        _env_start_done.wait(30)  # as long as stop() waits: a child forked mid-import would deadlock


def _after_fork_in_child() -> None:
    """Each forked worker records into a run directory of its own."""
    global _current, _lock, _env_start_done
    _lock = threading.Lock()
    _stopping_threads.clear()  # the threads that were stopping did not survive the fork
    _stops_done.set()
    parent = _current
    starting = not _env_start_done.is_set()  # the parent was still starting from the environment
    _env_start_done = threading.Event()
    _env_start_done.set()
    _probe.reset_after_fork()
    _exit.after_fork_in_child()  # multiprocessing's children leave through os._exit
    if parent is None:
        if starting:  # that start's thread did not survive the fork: start afresh in this child
            start_from_env()
        return
    _inherited.append(parent)  # its threads are gone and its files belong to the parent
    _current = None
    _probe.deactivate()
    try:
        child = start(
            parent.output_dir,
            service=parent.service,
            tags=parent.tags,
            sample_devices=parent.sample_devices,
            sample_interval_s=parent.sample_interval_s,
            flush_interval_s=parent.flush_interval_s,
            max_buffered_spans=parent.max_buffered_spans,
            rotate_interval_s=parent.rotate_interval_s,
            rotate_bytes=parent.rotate_bytes,
            forked_from=parent.run_id,
        )
        child.from_env = parent.from_env
    except Exception as exc:
        log.warning("loadprobe: forked process %d could not start recording: %s", os.getpid(), exc)
