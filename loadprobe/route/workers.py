"""``Workers``: the daemon threads that run one engine's plain-function (sync) executor calls.

Not a ``concurrent.futures.ThreadPoolExecutor``: that one's threads are joined when the
interpreter exits, so a single executor call that never returns (a hung device driver) would
keep the process alive forever after the router closed. These threads are daemons the router
owns: ``close()`` abandons the calls still running, and a result that comes after it is
dropped and counted in ``late`` instead of being handed to an event loop that may be closed.

Usage (from the router's event loop)::

    workers = Workers(4, "loadprobe-route-gpu0")
    workers.submit(fn, payload, contextvars.copy_context(), deliver)   # deliver(result, exc), on the worker
    workers.close()
"""

from __future__ import annotations

import contextvars
import queue
import threading
from typing import Any, Callable

__all__ = ["Workers"]


class Workers:
    """Up to ``size`` daemon threads, started as calls need them; one call at a time each."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self.closed = False
        self.late = 0  # results that came after close() and were dropped
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one permit per thread waiting for a job
        self._started = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable, arg: Any, context: contextvars.Context,
               deliver: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``context.run(fn, arg)`` on a worker; it calls ``deliver(result, exc)`` unless closed by then.

        ``deliver`` runs on the worker thread; a RuntimeError from it (the event loop closed
        meanwhile) counts the result as late.
        """
        if not self._idle.acquire(blocking=False) and self._started < self.size:
            self._started += 1
            threading.Thread(target=self._work, name=f"{self.name}_{self._started - 1}", daemon=True).start()
        self._jobs.put((fn, arg, context, deliver))

    def close(self) -> None:
        """Let idle threads end; calls still running are abandoned (their threads end when they return)."""
        self.closed = True
        for _ in range(self._started):
            self._jobs.put(None)

    def drop_late(self) -> None:
        """Count one result nobody will read (called from worker threads and the loop alike)."""
        with self._lock:
            self.late += 1

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, arg, context, deliver = job
            try:
                result, exc = context.run(fn, arg), None
            except BaseException as error:  # noqa: BLE001 - the request's outcome, handed over
                result, exc = None, error
            if self.closed:
                self.drop_late()
            else:
                try:
                    deliver(result, exc)
                except RuntimeError:  # "Event loop is closed": it closed after the check above
                    self.drop_late()
            del job, fn, arg, context, deliver, result, exc  # an idle thread holds no payload
            self._idle.release()
