"""A sampled span's CPU where open-to-close would count other work: a coroutine's own steps, and whether an
event loop runs on the thread at all. Standard library only: this runs inside the user's service.

Usage (``probe.py``'s async wrapper)::

    result = await OnCpu(fn(*args, **kwargs), span)   # span._cpu_steps += the CPU of each step
"""

from __future__ import annotations

import sys
from time import thread_time_ns as _thread_ns

from .buffers import thread_buffer

__all__ = ["OnCpu", "on_event_loop", "settle"]


def settle(buf, held: int, spent: int) -> int:
    """A sampled span (or coroutine step) that took ``spent`` ns of its thread's CPU ends: its own CPU, less the
    sampled spans that ended inside it (``buf.inner_cpu``); all of it goes to what runs around it, whose total
    was ``held`` when it began."""
    own, buf.inner_cpu = spent - buf.inner_cpu, held + spent
    return own


def on_event_loop() -> bool:
    """Whether an asyncio event loop runs on this thread (without importing asyncio when nothing did)."""
    aio = sys.modules.get("asyncio")
    return aio is not None and aio._get_running_loop() is not None


class OnCpu:
    """``await OnCpu(coro, span)`` awaits ``coro`` and adds the thread CPU of each of its steps to the span (less
    that of the sampled spans inside a step): between its steps the event loop runs other requests on the same
    thread, so the CPU from open to close would be theirs too. A task it starts (``gather``, ``create_task``)
    or a thread it hands work to runs outside its steps: their CPU is theirs. Values, exceptions and
    cancellation pass through unchanged."""

    __slots__ = ("_coro", "_span")

    def __init__(self, coro, span) -> None:
        self._coro, self._span = coro, span

    def __await__(self):
        coro, span = self._coro, self._span
        send, throw = coro.send, coro.throw
        value, error = None, None
        while True:
            buf = thread_buffer()  # a step's sampled children end inside it, on this thread: not its own CPU
            held, buf.inner_cpu = buf.inner_cpu, 0
            c0 = _thread_ns()
            try:
                awaited = send(value) if error is None else throw(error)
            except StopIteration as done:
                span._cpu_steps += settle(buf, held, _thread_ns() - c0)
                return done.value
            except BaseException:
                span._cpu_steps += settle(buf, held, _thread_ns() - c0)
                raise
            span._cpu_steps += settle(buf, held, _thread_ns() - c0)
            value, error = None, None
            try:
                value = yield awaited
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # thrown in by the loop (a cancellation): into the coroutine
                error = exc
