"""The recorder's background thread: drain spans and samples, convert, write, count what is lost.

The host's threads never wait for it. Each round drains the span buffers (``buffers.drain``)
and the device sampler, converts spans into Arrow batches (``tables.py``) in slices, and appends
the batches to the segment files (``segments.py``). Data the disk refuses waits in memory,
bounded like the buffers (oldest first out, counted as dropped), and is retried the next round;
a value the converter cannot take is counted and left out. A round runs every
``flush_interval_s``, when half the buffer cap is waiting, or when ``flush()`` asks.

Usage (a Recorder owns one; it reads the recorder's settings each round)::

    flusher = Flusher(recorder)               # the segment writers and the span converter
    flusher.sampler = sampler                 # the device sampler whose readings it writes, if any
    flusher.move_to(run_dir)                  # where the segments go, once the run directory is made
    flusher.start()
    flusher.flush(timeout=10.0)               # True once what was buffered is written (or tried, counted)
    flusher.stop(timeout=10.0)                # the last round; the segments finished as Parquet

The recorder hears back through three of its methods: ``_recover_dead_runs()`` as the thread
starts, ``_after_flush()`` after each round (run.json, when the counters changed) and
``_finished()`` once the files are closed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from time import perf_counter_ns

from . import buffers as _buffers

_CONVERT_ROWS = 1 << 14  # spans per Arrow batch: bounds the flusher's temporary memory
_YIELD_S = 50e-6  # the flusher sleeps this long between conversion slices (tables.SLICE_ROWS)
# Up to this many spans per flush the flusher yields the GIL between slices, so a service's
# threads never wait behind it; above it (a flood far beyond any service's request rate) it
# converts at full speed instead, since each yield costs up to a 5 ms switch interval to win
# the GIL back from busy threads, and yielding would turn the flood into dropped spans.
_YIELD_BELOW_ROWS = 1 << 16
_FLUSH_POLL_S = 0.05


def _yield_gil() -> None:
    """Let a host thread waiting for the GIL take it now (sleep(0) would take it straight back)."""
    time.sleep(_YIELD_S)


class Flusher:
    """One recorder's flusher thread, its writers and what it has counted.

    ``spans_drained``, ``invalid_spans``, ``write_errors`` and ``lost(kind)`` feed the
    recorder's stats; ``final`` is set once nothing more will be written (what is still
    pending is lost then).
    """

    def __init__(self, recorder) -> None:
        from . import segments as _segments, tables as _tables

        self._recorder = recorder
        self.sampler = None
        self.converter = _tables.SpanConverter(recorder.run_id)
        self.writers = {
            kind: _segments.SegmentWriter(recorder.run_dir, kind, rotate_bytes=recorder.rotate_bytes,
                                          rotate_interval_s=recorder.rotate_interval_s)
            for kind in ("spans", "samples")
        }
        self.pending: dict[str, list] = {"spans": [], "samples": []}
        self.spans_drained = 0
        self.invalid_spans = 0  # spans the converter refused
        self.write_errors = 0
        self.final = False
        self._lost_rows: dict[str, int] = {}  # rows dropped while the disk refused them
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._flush_cond = threading.Condition()
        self._flushes_done = 0
        self._flushes_asked = 0

    def move_to(self, run_dir: Path) -> None:
        for writer in self.writers.values():
            writer.directory = run_dir

    def lost(self, kind: str) -> int:
        return self._lost_rows.get(kind, 0)

    # -- driven by the recorder -------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="loadprobe-flusher", daemon=True)
        self._thread.start()

    def flush(self, timeout: float) -> bool:
        thread = self._thread
        if thread is None or not thread.is_alive():
            return False
        with self._flush_cond:
            self._flushes_asked += 1
            wanted = self._flushes_asked
            self._wake.set()
            return self._flush_cond.wait_for(lambda: self._flushes_done >= wanted, timeout)

    def stop(self, timeout: float) -> None:
        """Ask for the last round and wait for it up to ``timeout``; ``final`` either way."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        # Whatever the flusher has not written by now is lost, and counted so (a flusher still
        # stuck on a refusing disk may yet write some; its run.json then says so).
        self.final = True

    # -- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        recorder = self._recorder
        recorder._recover_dead_runs()
        last = time.monotonic()
        early = max(1, recorder.max_buffered_spans // 2)
        while not self._stopping:
            self._wake.wait(_FLUSH_POLL_S)
            if self._stopping:
                break
            asked = self._wake.is_set()
            if (asked or time.monotonic() - last >= recorder.flush_interval_s
                    or (recorder.record_spans and _buffers.buffered() >= early)):
                self._wake.clear()
                self._flush_once()
                last = time.monotonic()
        self._flush_once()
        for writer in self.writers.values():
            writer.close()
        self.final = True  # what the last flush could not write is lost now, and counted
        recorder._finished()
        with self._flush_cond:
            self._flushes_done = self._flushes_asked
            self._flush_cond.notify_all()

    def _flush_once(self) -> None:
        recorder = self._recorder
        done = self._flushes_asked
        try:
            offset = time.time_ns() - perf_counter_ns()
            if recorder.record_spans:
                rows = _buffers.drain()
                self.spans_drained += len(rows)
                pause = _yield_gil if len(rows) <= _YIELD_BELOW_ROWS else None
                for at in range(0, len(rows), _CONVERT_ROWS):
                    chunk = rows[at:at + _CONVERT_ROWS]
                    try:
                        self.pending["spans"].append(self.converter.batch(chunk, offset, pause))
                    except Exception as exc:  # a value the converter cannot take: count the loss, go on
                        self.invalid_spans += len(chunk)
                        recorder._warn_once("convert", f"loadprobe: could not convert {len(chunk)} spans ({exc!r}); "
                                                       "they are counted as dropped")
                del rows
            if self.sampler is not None:
                samples = self.sampler.drain()
                if samples:
                    from .tables import samples_batch

                    self.pending["samples"].append(samples_batch(samples))
            for kind in self.pending:
                self._write_pending(kind)
            recorder._after_flush()
        except Exception as exc:  # a bug here must never reach the host; say it once
            recorder._warn_once("internal", f"loadprobe: flusher error, recording continues: {exc!r}")
        with self._flush_cond:
            self._flushes_done = max(self._flushes_done, done)
            self._flush_cond.notify_all()

    def _write_pending(self, kind: str) -> None:
        pending, writer = self.pending[kind], self.writers[kind]
        try:
            while pending:
                writer.write(pending[0])
                pending.pop(0)
            writer.rotate_if_due()
        except OSError as exc:
            self.write_errors += 1
            self._recorder._warn_once("write", f"loadprobe: cannot write to {self._recorder.run_dir} ({exc}); "
                                               "keeping data in memory up to the cap and retrying")
        # Data the disk refused waits in memory, bounded like the buffers: oldest goes first.
        while sum(b.num_rows for b in pending) > self._recorder.max_buffered_spans and len(pending) > 1:
            self._lost_rows[kind] = self._lost_rows.get(kind, 0) + pending.pop(0).num_rows
