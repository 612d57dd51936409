"""The recorder: drains span buffers and device samples into one run directory per process.

One background thread (the flusher, ``flusher.py``) converts what the probes buffered into
Arrow batches and appends them to segment files (``segments.py``); another samples devices
(``samplers.py``). The host's threads never wait for either: write errors are counted,
logged once and retried; past the memory cap spans are dropped and counted. Counters
land in run.json (``rundir.py``) so analysis can report data loss honestly. This module is
the recorder's API and the process's one recorder: started by ``loadprobe.start()`` or
LOADPROBE_DIR, carried across fork, stopped at exit.

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
import logging
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import buffers as _buffers, env as _env, exits as _exit, inventory as _inventory, probe as _probe
from . import rundir, stages as _stages

log = logging.getLogger("loadprobe")


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
        sample_interpreter: bool = True,
        sample_interval_s: float = 0.5,
        flush_interval_s: float = 1.0,
        max_buffered_spans: int = _buffers.DEFAULT_MAX_BUFFERED_SPANS,
        rotate_interval_s: float = 60.0,
        rotate_bytes: int = 64 << 20,
        record_spans: bool = True,
        sampler_pids: list[int] | None = None,
        forked_from: str | None = None,
        more_sources: list | None = None,
    ) -> None:
        for name, value in (("sample_interval_s", sample_interval_s), ("flush_interval_s", flush_interval_s),
                            ("rotate_interval_s", rotate_interval_s)):
            if not value > 0:
                raise ValueError(f"loadprobe.start: {name} must be > 0 seconds, got {value!r}")
        if max_buffered_spans < 1 or rotate_bytes < 1:
            raise ValueError("loadprobe.start: max_buffered_spans and rotate_bytes must be positive")
        self.output_dir = Path(output_dir)
        self.service = rundir.safe_name(service or os.environ.get(_env.LOADPROBE_SERVICE) or _program_name())
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.sample_devices = sample_devices
        self.sample_interpreter = sample_interpreter and record_spans  # the interpreter serving the spans
        self.sample_interval_s = sample_interval_s
        self.flush_interval_s = flush_interval_s
        self.max_buffered_spans = max_buffered_spans
        self.rotate_interval_s = rotate_interval_s
        self.rotate_bytes = rotate_bytes
        self.record_spans = record_spans
        self.sampler_pids = sampler_pids
        self.more_sources = list(more_sources or [])  # sampled whatever sample_devices says (a scraped endpoint)
        self.forked_from = forked_from
        self.from_env = False  # started by LOADPROBE_DIR rather than by the program
        self.pid = os.getpid()
        self.started_ns = time.time_ns()
        self.run_id = rundir.recorded_run_id(self.pid, self.started_ns)
        self.run_dir = rundir.run_path(self.output_dir, rundir.host_name(), self.service, self.run_id)
        self.stopped_ns: int | None = None
        self._write_errors = 0  # the run directory's and run.json's; the flusher counts its own
        self._warned: set[str] = set()
        self._sampler = None
        self._availability: dict = {}
        self._hardware: dict = {}
        self._last_counters: tuple | None = None
        self._counter_base = (0, 0)
        from .flusher import Flusher  # here, not at import: it loads pyarrow

        self._flusher = Flusher(self)  # the writers, the converter and the thread; started by start()

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Recorder:
        """Set up samplers and the flusher thread, write run.json, start accepting spans."""
        from . import samplers as _samplers

        self._counter_base = _buffers.counters()
        if self.record_spans:
            _probe.activate(self.max_buffered_spans)  # buffer from now; written once the flusher runs
        sources = _samplers.default_sources(self.sampler_pids, include_children=self.sampler_pids is not None)
        gpus = next((s.inventory() for s in sources if s.name == "nvml"), [])
        self._hardware = _inventory.hardware(gpus)
        if not self.sample_devices:  # under ``loadprobe record`` its supervisor samples the devices
            for source in sources:
                if hasattr(source, "close"):
                    source.close()
            sources = []
        if self.sample_interpreter:
            sources.append(_samplers.InterpreterSource())
        sources += self.more_sources
        self._availability = {s.name: s.availability() for s in sources}
        if sources:
            self._sampler = _samplers.Sampler(sources, self.sample_interval_s)
        self._flusher.sampler = self._sampler
        self._reserve_run_dir()
        self._write_run_json()
        self._flusher.start()
        if self._sampler is not None:
            self._sampler.start()
        return self

    def flush(self, timeout: float = 10.0) -> bool:
        """Write everything buffered so far; True once it is on disk (or tried and counted)."""
        # This thread holds the flusher's locks here (its condition, its wake Event's), which a
        # fatal signal's stop on top of it would wait for: the signal waits (_holding_signals).
        with _holding_signals():
            return self._flusher.flush(timeout)

    def stop(self, timeout: float = 10.0) -> RecorderStats:
        """Stop sampling and recording, write what is left, finish the files as Parquet."""
        with _holding_signals():
            return self._stop(timeout)

    def _stop(self, timeout: float) -> RecorderStats:
        global _current
        if _current is self:  # stopped directly: the next loadprobe.start() makes a new recorder
            _current = None
        if self.record_spans:
            _probe.deactivate()
        if self._sampler is not None:
            self._sampler.stop()
        self._flusher.stop(timeout)  # what it has not written by then is lost, and counted so
        return self.stats()

    def stats(self) -> RecorderStats:
        """The counters now (while recording, ``spans_pending`` is what waits in memory)."""
        flusher = self._flusher
        cap_dropped, extractor_errors = _buffers.counters() if self.record_spans else (0, 0)
        cap_dropped -= self._counter_base[0]  # the process-wide counters, since this recorder started
        extractor_errors -= self._counter_base[1]
        buffered = _buffers.buffered() if self.record_spans and not flusher.final else 0
        spans_writer, samples_writer = flusher.writers["spans"], flusher.writers["samples"]
        recorded = flusher.spans_drained + buffered + cap_dropped
        written = spans_writer.rows_written
        write_dropped, invalid = flusher.lost("spans"), flusher.invalid_spans
        dropped = cap_dropped + write_dropped + invalid
        # Drained but not yet written: in the flusher's hands or waiting for the disk.
        in_memory = max(0, recorded - written - dropped)
        samples_in_memory = sum(b.num_rows for b in flusher.pending["samples"])
        return RecorderStats(
            run_dir=str(self.run_dir),
            spans_recorded=recorded,
            spans_dropped=dropped,
            spans_written=written,
            samples_written=samples_writer.rows_written,
            samples_dropped=(self._sampler.dropped if self._sampler else 0) + flusher.lost("samples"),
            files=sum(w.files_written for w in flusher.writers.values()),
            write_errors=(self._write_errors + flusher.write_errors
                          + sum(w.rotation_errors for w in flusher.writers.values())),
            extractor_errors=extractor_errors,
            invalid_values=flusher.converter.invalid_values,
            spans_dropped_cap=cap_dropped,
            spans_dropped_write=write_dropped,
            spans_dropped_invalid=invalid,
            spans_pending=0 if flusher.final else in_memory,
            spans_lost=in_memory if flusher.final else 0,
            samples_lost=samples_in_memory if flusher.final else 0,
        )

    # -- called back by the flusher thread ---------------------------------------------

    def _after_flush(self) -> None:
        counters = tuple(self.stats().as_dict().values())
        if counters != self._last_counters:
            self._last_counters = counters
            self._write_run_json()

    def _finished(self) -> None:
        self.stopped_ns = time.time_ns()
        self._write_run_json()

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    # -- run directory and run.json ---------------------------------------------------

    def _reserve_run_dir(self) -> None:
        """Create a run directory nobody has used; never reuse one (nothing is overwritten)."""
        try:
            self.run_dir = rundir.create(self.run_dir)
        except OSError as exc:
            self._write_errors += 1
            self._warn_once("write", f"loadprobe: cannot create {self.run_dir} ({exc}); "
                                     "recording continues in memory up to the cap and keeps retrying")
        self._flusher.move_to(self.run_dir)

    def run_info(self) -> dict:
        """The content of run.json."""
        proc_started = None
        try:
            import psutil

            proc_started = psutil.Process(self.pid).create_time()
        except Exception:
            pass
        return rundir.run_document(
            host=rundir.host_name(), service=self.service, run_id=self.run_id, pid=self.pid,
            process_started=proc_started, started_ns=self.started_ns, stopped_ns=self.stopped_ns,
            forked_from=self.forked_from, tags=self.tags, role="service" if self.record_spans else "supervisor",
            settings={
                "sample_devices": self.sample_devices,
                "sample_interval_s": self.sample_interval_s,
                "flush_interval_s": self.flush_interval_s,
                "max_buffered_spans": self.max_buffered_spans,
                "rotate_interval_s": self.rotate_interval_s,
                "rotate_bytes": self.rotate_bytes,
            },
            hardware=self._hardware,
            samplers=self._availability,
            counters={k: v for k, v in self.stats().as_dict().items() if k != "run_dir"},
        )

    def _write_run_json(self) -> None:
        # Written with room to spare: a full disk refuses a new file but not the blocks run.json
        # already has, so the counters (loss included) still reach the disk, written in place.
        try:
            rundir.write_run_json(self.run_dir, self.run_info(), room=True)
        except OSError as exc:
            self._write_errors += 1
            self._warn_once("write", f"loadprobe: cannot write {self.run_dir / rundir.RUN_JSON} ({exc}); "
                                     "recording continues")
            rundir.rewrite_in_place(self.run_dir, self.run_info())

    def _recover_dead_runs(self) -> None:
        """Finish segments that crashed processes of this service left on this host."""
        from .segments import recover_run

        try:
            siblings = [p for p in self.run_dir.parent.iterdir() if p.is_dir() and p != self.run_dir]
        except OSError:
            return
        for run_dir in siblings:
            try:
                if rundir.run_is_dead(run_dir):
                    recover_run(run_dir)
            except Exception as exc:
                self._warn_once("recover", f"loadprobe: could not recover {run_dir}: {exc}")


def _program_name() -> str:
    path = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    name = path.stem
    if name in ("__main__", "-c", ""):
        name = path.parent.name or "python"
    return name


# -- the process-wide recorder ---------------------------------------------------------

_current: Recorder | None = None
_lock = threading.Lock()
_hooks_installed = False
_inherited: list = []  # a forked child's copy of the parent's recorder: kept, never closed
_holding_threads: dict[int, int] = {}  # thread -> how deep inside a start, stop or flush it is now


def start(output_dir: str | os.PathLike = "loadprobe-data", **options) -> Recorder:
    global _current
    # A signal landing in the start waits for its end (a stop on top would find _lock held and
    # _current not yet set), then stops what it started: a Pool worker still starting when
    # Pool.terminate() came used to leave a run without its end.
    with _holding_signals(), _lock:
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
    with _holding_signals():  # first: a signal landing in the wait below must not wait for its lock
        _env_start_done.wait(30)  # a recorder starting from the environment finishes first
        with _lock:
            recorder, _current = _current, None
        return recorder.stop() if recorder is not None else None


@contextlib.contextmanager
def _holding_signals():
    """Mark this thread as inside a start, stop or flush: a fatal signal landing meanwhile lets
    it finish (see ``stop_for_exit``), and is handled when it has.

    The handler runs on top of the code it interrupted, on this thread, so it must never wait
    for a lock that code may hold: an Event's is not reentrant (it would wait forever), the
    flusher cannot finish while this thread holds its condition, and _lock held by a start would
    leave that start's run unstopped. So the mark -- a plain dict write, which a handler (it runs
    between bytecodes) cannot split -- is made before the block takes any lock or waits, and
    removed only after its last lock operation (nothing here takes one); the handler, finding
    it, defers the signal without touching a lock.
    """
    me = threading.get_ident()
    _holding_threads[me] = _holding_threads.get(me, 0) + 1
    try:
        yield
    finally:
        depth = _holding_threads.get(me, 1) - 1
        if depth:
            _holding_threads[me] = depth  # never unmarked in between
        else:
            _holding_threads.pop(me, None)  # (None: a fork meanwhile cleared it in the child)
            _exit.deliver_deferred_signal()


def stop_for_exit(timeout: float) -> bool:
    """``stop()`` from a signal handler or a process's last finalizer, bounded in time.

    Returns False when the signal interrupted a start, stop or flush on this very thread: that
    code cannot go on until the handler returns, so the handler must defer the signal rather
    than wait. One under way on another thread is waited for, bounded in time.
    """
    global _current
    me = threading.get_ident()
    if me in _holding_threads:
        return False
    with _holding_signals():  # before the first wait: a second signal landing in it is deferred too
        # Polled rather than Event.wait(), which takes the Event's lock: code this signal
        # interrupted here may hold it (a fork's _before_fork wait).
        _wait_until(_env_start_done.is_set, timeout)
        # Another thread starting, stopping or flushing: dying now would cut its last flush short.
        _wait_until(lambda: not (_holding_threads.keys() - {me}), timeout)
        locked = _lock.acquire(timeout=1.0)  # only another thread holds it: bounded all the same
        try:
            recorder, _current = _current, None
        finally:
            if locked:
                _lock.release()
        if recorder is not None:
            recorder.stop(timeout)
    return True


def _wait_until(done, timeout: float) -> None:
    """Poll ``done()`` for up to ``timeout`` seconds, taking no lock (see ``stop_for_exit``)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.005)


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
    _probe.activate(_buffers.DEFAULT_MAX_BUFFERED_SPANS)
    with _holding_signals():  # a signal waits for the start thread to be under way, then for it
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
    _holding_threads.clear()  # the threads inside a start, stop or flush did not survive the fork
    parent = _current
    starting = not _env_start_done.is_set()  # the parent was still starting from the environment
    _env_start_done = threading.Event()
    _env_start_done.set()
    _buffers.reset_after_fork()  # the parent's unflushed spans are the parent's to write
    _stages.reset_after_fork()
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
            sample_interpreter=parent.sample_interpreter,
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
