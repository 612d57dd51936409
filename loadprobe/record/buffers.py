"""Per-thread span buffers under one memory budget for the process, drained by the flusher.

Only a buffer's own thread appends, and only at the end; the flusher copies the first ``n``
spans and deletes them (``del spans[:n]``), so appends racing a drain land after ``n`` and
are kept: no lock on either side.

One memory bound for the process. Each thread holds a reservation (``ThreadBuffer.limit``)
taken from the budget a chunk at a time, so the hot path compares ``len()`` with its own
reservation and touches nothing shared; a thread that fills its reservation asks for another
chunk (``append`` -> ``_grow``, under the lock, once per chunk). A drain empties buffers but
leaves their reservations, so a busy thread keeps writing without asking. When the budget is
spent, reservations other threads hold but do not use (an idle thread's chunk, a burst's
leftover after a drain) are taken back -- once per drain or grant, so a full process drops
without scanning every buffer each time -- and spans are dropped only when the spans actually
held reach the cap, whatever the number of threads.

Usage (the hot path in ``probe.py`` inlines the first two lines)::

    buf = thread_buffer()
    if len(buf.spans) < buf.limit: buf.spans.append(span)
    else: append(buf, span)                      # reserve more room, or count the drop

    set_budget(131_072)                          # the recorder, at start
    rows = drain()                               # the flusher, each flush
"""

from __future__ import annotations

import threading
import weakref

__all__ = ["DEFAULT_MAX_BUFFERED_SPANS", "ROOT", "ThreadBuffer", "append", "attach", "buffered", "counters",
           "drain", "note_extract_error", "reset_after_fork", "set_budget", "thread_buffer", "thread_local"]

ROOT = (None, 0, None)
"""A frame is (request_id, span_id, cpu_timed) of the innermost open span; span_id 0 means "none".
``cpu_timed``: whether the unit it belongs to (its request, or its outermost span) times CPU; None
outside every unit, where a new span decides for itself."""

DEFAULT_MAX_BUFFERED_SPANS = 1 << 17
CHUNK = 1024  # spans a thread reserves from the process's budget at a time


class _Alive:
    """Lives in a thread's ``threading.local``; its death tells the flusher the thread ended."""

    __slots__ = ("__weakref__",)


class ThreadBuffer:
    """Spans finished on one thread, waiting for the flusher, and that thread's open sync span."""

    __slots__ = ("spans", "limit", "frame", "dropped", "extract_errors", "alive", "inner_cpu")

    def __init__(self, alive: _Alive) -> None:
        self.spans: list[tuple] = []
        self.limit = 0  # spans it may hold without asking: its share reserved from _max_buffered
        self.frame = ROOT
        self.dropped = 0
        self.extract_errors = 0
        self.alive = weakref.ref(alive)
        # The CPU (ns) of sampled spans that ended on this thread while the innermost running sampled span ran:
        # that span's children, which it takes off its own CPU (saved and restored around each, as a stack).
        self.inner_cpu = 0


thread_local = threading.local()
"""``thread_local.buf`` is the calling thread's ThreadBuffer once it has one (see ``attach``)."""

_buffers: list[ThreadBuffer] = []
_buffers_lock = threading.Lock()
_max_buffered = 0
_chunk = CHUNK
_reserved = 0  # sum of the buffers' limits; at most _max_buffered
_changes = 0  # drains and grants so far: only after one can a reclaim find unused room
_reclaimed_at = -1  # _changes at the last reclaim
_retired = [0, 0]  # dropped, extract_errors of buffers whose threads have ended


def thread_buffer() -> ThreadBuffer:
    """This thread's buffer, registering it on first use."""
    try:
        return thread_local.buf
    except AttributeError:
        return attach()


def attach() -> ThreadBuffer:
    """Give the calling thread a buffer (it has none yet) and register it for the flusher."""
    alive = _Alive()
    buf = ThreadBuffer(alive)
    thread_local.alive, thread_local.buf = alive, buf
    with _buffers_lock:
        _buffers.append(buf)
    return buf


def note_extract_error() -> None:
    """Count a failure to describe a call (an extractor, a shape, a cost) on this thread's buffer."""
    thread_buffer().extract_errors += 1


def append(buf: ThreadBuffer, record: tuple) -> None:
    """Append past ``buf``'s reservation: reserve another chunk, or count the span dropped."""
    if len(buf.spans) < buf.limit or _grow(buf):
        buf.spans.append(record)
    else:
        buf.dropped += 1


def _grow(buf: ThreadBuffer) -> bool:
    """Room for one more span in ``buf``: reserve another chunk; False when the process is full."""
    global _reserved, _reclaimed_at, _changes
    if _reserved >= _max_buffered and _reclaimed_at == _changes and len(buf.spans) >= buf.limit:
        return False  # full, and nothing drained or granted since the last reclaim: drop without the lock
    with _buffers_lock:
        if len(buf.spans) < buf.limit:  # drained meanwhile
            return True
        free = _max_buffered - _reserved
        if free <= 0 and _reclaimed_at != _changes:
            _reclaimed_at = _changes
            for other in _buffers:
                unused = other.limit - len(other.spans)
                if unused > 0:
                    other.limit -= unused
                    _reserved -= unused
            free = _max_buffered - _reserved
        if free <= 0:
            return False
        grant = min(free, _chunk)
        buf.limit += grant
        _reserved += grant
        _changes += 1  # the rest of this grant is room a later reclaim may take back
        return True


def set_budget(max_buffered_spans: int) -> None:
    """The process buffers at most ``max_buffered_spans`` from now; reservations start afresh."""
    global _max_buffered, _chunk, _reserved
    with _buffers_lock:
        _max_buffered = max_buffered_spans
        _chunk = max(1, min(CHUNK, max_buffered_spans // 64))  # a small cap still spreads over threads
        _reserved = 0
        for buf in _buffers:  # what is held still counts
            buf.limit = len(buf.spans)
            _reserved += buf.limit


def drain() -> list[tuple]:
    """Take every finished span from every thread (flusher thread only)."""
    global _changes, _reserved
    rows: list[tuple] = []
    # No lock to read the list (copying it is atomic under the GIL): a signal handler that
    # stops the recorder may have interrupted the thread holding it.
    buffers = list(_buffers)
    ended = []
    for buf in buffers:
        spans = buf.spans
        n = len(spans)
        if n:
            # Only the owner appends, and only at the end: the first n stay put while we copy.
            rows += spans[:n]
            del spans[:n]
        if buf.alive() is None and not spans:
            ended.append(buf)
    _changes += 1
    if ended and _buffers_lock.acquire(timeout=1.0):
        try:
            for buf in ended:
                _buffers.remove(buf)
                _retired[0] += buf.dropped
                _retired[1] += buf.extract_errors
                _reserved -= buf.limit  # an ended thread's reservation returns to the budget
        finally:
            _buffers_lock.release()
    return rows


def buffered() -> int:
    """Spans waiting in buffers now."""
    return sum(len(buf.spans) for buf in list(_buffers))


def counters() -> tuple[int, int]:
    """(spans dropped at the cap, extractor errors) since the process started recording."""
    buffers = list(_buffers)  # lock-free, as in drain()
    retired = list(_retired)
    return (
        retired[0] + sum(b.dropped for b in buffers),
        retired[1] + sum(b.extract_errors for b in buffers),
    )


def reset_after_fork() -> None:
    """In a forked child: forget the parent's unflushed spans (the parent writes them)."""
    global _buffers_lock, _reserved
    _buffers_lock = threading.Lock()  # another thread may have held it at the fork
    _buffers.clear()
    _retired[:] = [0, 0]
    _reserved = 0
    if getattr(thread_local, "buf", None) is not None:
        buf = thread_local.buf
        buf.spans.clear()
        buf.limit = 0
        buf.dropped = buf.extract_errors = 0
        _buffers.append(buf)
