"""How a recording survives the end of its process: fatal signals and multiprocessing's exits.

``atexit`` covers a process that returns from its main program or calls ``sys.exit``. Three
common ends skip it, and each loses the spans of the last flush interval:

- **A fatal signal with the default action.** SIGTERM, SIGHUP (and SIGINT where a server set
  it to SIG_DFL, as gunicorn's uvicorn worker does) kill the process in the kernel: no Python
  code runs. uvicorn even catches SIGTERM for a graceful shutdown and then re-raises it with
  the handler it found, so a server that stopped cleanly still dies by the signal. Where the
  disposition is SIG_DFL we install a handler that stops the recorder (bounded in time) and
  re-raises the signal with SIG_DFL, so the exit status the host's supervisor sees is unchanged.
  A handler the host installed is never replaced. A signal that lands while this thread is
  already starting, stopping (atexit, a finalizer) or flushing cannot wait for that -- it runs
  on top of it, and would wait for locks it holds -- so it is held back and handled at its end.
- **multiprocessing's children** (fork and forkserver) leave through ``os._exit`` after running
  ``multiprocessing.util``'s finalizers; ``Pool.terminate()`` (and ``with Pool()``) ends its
  workers with SIGTERM. A finalizer stops the recorder; the inherited signal handler covers
  terminate, and a watcher thread makes sure that handler runs (see ``_watch_lost_signals``).
- **ASGI servers** import the app after installing their signal handlers, so the first item
  cannot apply; ``instrumentation/asgi.py`` stops the recorder at the app's lifespan shutdown.

Only the standard library is imported here: ``_probe`` calls :func:`install_signal_handlers`
at import when ``LOADPROBE_DIR`` is set, before the host's server starts serving.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# Signals whose default action ends the process and which supervisors send for an orderly stop.
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))
STOP_TIMEOUT_S = 10.0  # a signal's stop must end well inside gunicorn's and Kubernetes' 30 s grace

_finalizer_pid = 0  # the process in which the multiprocessing finalizer is registered
_deferred: int | None = None  # a fatal signal held back until the start, stop or flush it interrupted ends
_handlers_begun = 0  # how many times _on_fatal_signal has started in this process
_wakeup_fds: tuple[int, int] | None = None  # (read, write): the pipe we gave signal.set_wakeup_fd
_NUDGE_EVERY_S = 0.25  # how long the main thread gets to start the handler before a nudge


def install_signal_handlers() -> None:
    """Stop the recorder before a default-action fatal signal ends the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal works in the main thread only; the next start from there installs them
    for signum in SIGNALS:
        try:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _on_fatal_signal)
        except (ValueError, OSError, RuntimeError):  # not settable here (embedded interpreters, ...)
            pass


def _on_fatal_signal(signum, frame) -> None:
    """Finish the recording, then die of the signal as if we had never been here.

    It runs on top of whatever the main thread was doing, so it must never wait for a lock that
    code may hold: the recorder marks a thread inside a start, stop or flush before it takes any
    of its locks, and ``stop_for_exit`` returns False for such a thread without taking one.
    """
    global _deferred, _handlers_begun
    _handlers_begun += 1  # first: the watcher stops nudging (see _watch_lost_signals)
    try:
        if not stop_recorder(STOP_TIMEOUT_S):
            # The signal interrupted a start, stop or flush on this thread, which cannot go on
            # until we return: let it finish; its end delivers the signal (deliver_deferred_signal).
            if _deferred is None:
                _deferred = signum
            return
    except BaseException:
        pass
    _die(signum)


def _die(signum: int) -> None:
    try:
        signal.signal(signum, signal.SIG_DFL)
    finally:
        signal.raise_signal(signum)


def deliver_deferred_signal() -> None:
    """At the end of a start, stop or flush: handle the fatal signal that landed during it, if any.

    The handler again, now that nothing of ours is held: after a stop it finds nothing left to
    stop and dies at once; after a start or a flush it stops the recorder first. Only the main
    thread runs handlers, so only its starts, stops and flushes hold a signal back.
    """
    global _deferred
    if _deferred is None or threading.get_ident() != threading.main_thread().ident:
        return
    signum, _deferred = _deferred, None
    if signum is not None:
        _on_fatal_signal(signum, None)


def stop_recorder(timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the process's recorder if one runs; never raises (the process is ending).

    False when a stop this call interrupted (a signal handler's) is still under way.
    """
    recorder = sys.modules.get("loadprobe.record.recorder")
    if recorder is None:  # never imported: nothing was recorded in this process
        return True
    try:
        return recorder.stop_for_exit(timeout)
    except Exception:
        return True


def register_multiprocessing_finalizer() -> None:
    """In a multiprocessing child, stop the recorder in the finalizers run before its ``os._exit``.

    A forked child clears the finalizers it inherited before running the target, so a fork
    child registers again from an after-fork callback (see ``after_fork_in_child``).
    """
    global _finalizer_pid
    process = sys.modules.get("multiprocessing.process")
    if process is None:
        return
    try:
        if process.parent_process() is None:
            return  # the main process: atexit runs
        if _finalizer_pid != os.getpid():
            from multiprocessing import util

            # Lowest priority: runs in the last pass, after the child's own finalizers and children.
            util.Finalize(None, stop_recorder, exitpriority=-(1 << 30))
            _finalizer_pid = os.getpid()
        _watch_lost_signals()  # each time: an earlier call may have been off the main thread
    except Exception:
        pass


def _watch_lost_signals() -> None:
    """In a multiprocessing child: see that a fatal signal reaches our handler (main thread only).

    CPython runs a Python handler in the main thread once that thread is back in the
    interpreter; a thread blocked in C is woken by the signal (EINTR) and runs it. Not always:
    glibc's sem_wait (multiprocessing's locks, threading's), woken by a post that another
    process then takes first, runs the signal's C trampoline and waits again without returning.
    ``Pool.terminate()`` does just that to a worker waiting for the task queue's lock: it takes
    the lock for good, then sends SIGTERM. The default action would have killed the worker; with
    our handler it waited forever (the handler flagged in C, never run), and the pool's join
    with it. So the trampoline's byte on a wakeup fd of ours is read by a thread that, while no
    handler has started, sends the signal again to the main thread, whose wait then ends with
    EINTR and runs the handler. A wakeup fd the host set (an event loop, which wakes on it and
    runs handlers itself) is left alone; only multiprocessing's children, where the lock is
    taken for good, get ours.
    """
    global _wakeup_fds
    if _wakeup_fds is not None or threading.current_thread() is not threading.main_thread():
        return
    if not any(signal.getsignal(signum) is _on_fatal_signal for signum in SIGNALS):
        return
    read_fd, write_fd = os.pipe()
    try:
        os.set_blocking(write_fd, False)  # the trampoline must never block
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (OSError, ValueError):
        previous = None
    if previous != -1:  # not settable, or the host's own: put that back
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    _wakeup_fds = (read_fd, write_fd)
    try:
        threading.Thread(target=_nudge_lost_signals, args=(read_fd,), name="loadprobe-signals",
                         daemon=True).start()
    except RuntimeError:  # no new threads (interpreter shutting down)
        _drop_wakeup_fd()


def _drop_wakeup_fd() -> None:
    """Unset the wakeup fd if it is ours (the host's, set since, stays) and close our pipe."""
    global _wakeup_fds
    fds, _wakeup_fds = _wakeup_fds, None
    if fds is None:
        return
    try:
        current = signal.set_wakeup_fd(-1)
        if current not in (-1, fds[1]):
            signal.set_wakeup_fd(current)
    except (OSError, ValueError):
        pass
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _nudge_lost_signals(read_fd: int) -> None:
    """The watcher thread of ``_watch_lost_signals``."""
    main = threading.main_thread().ident
    while True:
        try:
            received = os.read(read_fd, 512)
        except OSError:
            return
        if not received:
            return
        fatal = [s for s in set(received) if s in SIGNALS and signal.getsignal(s) is _on_fatal_signal]
        # Once a handler has started the process is on its way out (or holds the signal back on
        # purpose, until its stop ends): nothing to nudge. Until then, nudge again now and then
        # (the main thread may be in long C code, where a nudge does no harm either).
        while fatal and not _handlers_begun:
            time.sleep(_NUDGE_EVERY_S)
            if not _handlers_begun:
                try:
                    signal.pthread_kill(main, fatal[0])
                except (OSError, ValueError):
                    return


class _AfterFork:
    """A live object for ``multiprocessing.util.register_after_fork`` (it keeps only weak references)."""


_after_fork_token = _AfterFork()


def after_fork_in_child() -> None:
    """From our ``os.register_at_fork`` hook: if multiprocessing is forking, register its finalizer
    once multiprocessing has cleared the inherited ones (its after-fork callbacks run after that)."""
    global _finalizer_pid, _deferred, _handlers_begun
    _finalizer_pid = 0
    _deferred = None  # the parent's to deliver
    _handlers_begun = 0
    if _wakeup_fds is not None:  # the parent's pipe, whose watcher did not survive the fork
        _drop_wakeup_fd()  # at once: the trampoline must not tell the parent of our signals
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            util.register_after_fork(_after_fork_token, lambda _token: register_multiprocessing_finalizer())
        except Exception:
            pass
