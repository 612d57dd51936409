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
  already stopping (atexit, a finalizer) cannot wait for that stop -- it runs on top of it --
  so it is held back and delivered when the stop ends.
- **multiprocessing's children** (fork and forkserver) leave through ``os._exit`` after running
  ``multiprocessing.util``'s finalizers; ``Pool.terminate()`` (and ``with Pool()``) ends its
  workers with SIGTERM. A finalizer stops the recorder; the inherited signal handler covers
  terminate.
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

# Signals whose default action ends the process and which supervisors send for an orderly stop.
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))
STOP_TIMEOUT_S = 10.0  # a signal's stop must end well inside gunicorn's and Kubernetes' 30 s grace

_finalizer_pid = 0  # the process in which the multiprocessing finalizer is registered
_deferred: int | None = None  # a fatal signal held back until the stop it interrupted ends


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
    """Finish the recording, then die of the signal as if we had never been here."""
    global _deferred
    try:
        if not stop_recorder(STOP_TIMEOUT_S):
            # The signal interrupted a stop on this thread, which cannot go on until we return:
            # let it finish; its end delivers the signal (deliver_deferred_signal).
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
    """At the end of a stop: die of the fatal signal that landed during it, if one did."""
    global _deferred
    signum, _deferred = _deferred, None
    if signum is not None:
        _die(signum)


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
    if process is None or _finalizer_pid == os.getpid():
        return
    try:
        if process.parent_process() is None:
            return  # the main process: atexit runs
        from multiprocessing import util

        # Lowest priority: runs in the last pass, after the child's own finalizers and children.
        util.Finalize(None, stop_recorder, exitpriority=-(1 << 30))
        _finalizer_pid = os.getpid()
    except Exception:
        pass


class _AfterFork:
    """A live object for ``multiprocessing.util.register_after_fork`` (it keeps only weak references)."""


_after_fork_token = _AfterFork()


def after_fork_in_child() -> None:
    """From our ``os.register_at_fork`` hook: if multiprocessing is forking, register its finalizer
    once multiprocessing has cleared the inherited ones (its after-fork callbacks run after that)."""
    global _finalizer_pid, _deferred
    _finalizer_pid = 0
    _deferred = None  # the parent's to deliver
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            util.register_after_fork(_after_fork_token, lambda _token: register_multiprocessing_finalizer())
        except Exception:
            pass
