"""An asyncio event loop whose timers wake on time: the load client's sends keep to their intended times.

Usage::

    result = in_precise_loop(main(), precise=True)   # asyncio.run, with the precise selector and timer slack
"""

from __future__ import annotations

import asyncio
import select
import selectors

__all__ = ["event_loop", "in_precise_loop", "timer_slack"]


class _PreciseEpollSelector(selectors.EpollSelector):
    """epoll that wakes within microseconds of a timer instead of up to a millisecond late.

    epoll_wait takes its timeout in whole milliseconds, rounded up, so asyncio's timers --
    hence every send -- would be up to 1 ms late. select() takes microseconds, and an epoll
    descriptor is itself readable when any descriptor it watches is: wait in select() on
    it, then collect the events with a zero-timeout epoll_wait.
    """

    def select(self, timeout=None):
        if timeout is not None and timeout > 0:
            try:
                select.select([self.fileno()], [], [], timeout)
            except ValueError:  # descriptor number past select()'s limit (1024): plain epoll
                return super().select(timeout)
            timeout = 0
        return super().select(timeout)


def event_loop(precise: bool) -> asyncio.AbstractEventLoop:
    """A new loop: on the precise epoll selector where there is epoll and ``precise``, else asyncio's own."""
    if precise and hasattr(selectors, "EpollSelector"):  # kqueue and others already take finer timeouts
        return asyncio.SelectorEventLoop(_PreciseEpollSelector())
    return asyncio.new_event_loop()


def in_precise_loop(coro, precise: bool):
    """Run ``coro`` to the end on a fresh loop (asyncio.run with our selector; Python 3.10 has no Runner)."""
    loop = event_loop(precise)
    slack = timer_slack(1) if precise else None
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:  # interrupted (Ctrl-C): let the run's own cleanup run
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            if slack is not None:
                timer_slack(slack)


def timer_slack(ns: int) -> int | None:
    """Set this thread's timer slack (Linux wakes sleepers up to 50 us late by default); returns the old one.

    Best effort: None where prctl is not available.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        old = prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK
        if old < 0 or prctl(29, ns, 0, 0, 0) != 0:  # PR_SET_TIMERSLACK
            return None
        return old
    except (OSError, AttributeError):
        return None
