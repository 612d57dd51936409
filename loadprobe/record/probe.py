"""Capture spans on the host's own threads: two clock reads and one append per probe.

Everything in this module runs inside the user's service. It imports only the standard
library, never raises into the caller and never blocks: a span is a tuple appended to a
list owned by the current thread (``buffers.py``), and the recorder's flusher thread
(``flusher.py``) drains those lists in the background.

Usage::

    from loadprobe import probe, request

    @probe("backbone", batch=lambda x: x.shape[0], engine="npu")
    def backbone(x): ...

    @request()
    async def handle(payload):
        with probe("nms") as span:
            span.batch = len(boxes)

Parents are tracked two ways, chosen for cost. A plain synchronous ``@probe`` keeps the
open span in its thread's buffer (``ThreadBuffer.frame``): nothing else can run on that
thread until the call returns, so a thread-local stack is exact and costs no allocation.
Everything that can be suspended or cross threads -- requests, async functions, ``with``
blocks, generators -- keeps it in a ContextVar, which asyncio tasks and
``asyncio.to_thread`` copy. A new span attaches to whichever of the two is newer (span
ids only grow), i.e. the innermost enclosing span.

Adapters (``instrumentation/``, the router) ask the hot path through three functions, never
its module state::

    if recording(): ...        # a recorder runs, or LOADPROBE_DIR starts one at the first span
    if not in_request(): ...   # no request span is open around the caller
    note_extract_error()       # a call could not be described: counted like a failing extractor
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from contextvars import ContextVar
from random import random as _random
from time import perf_counter_ns, thread_time_ns as _thread_ns

from . import buffers as _buffers
from .buffers import DEFAULT_MAX_BUFFERED_SPANS, ROOT, ThreadBuffer, thread_buffer
# Module globals of their own here, so the wrappers below read them as fast as before the split.
from .buffers import append as _append, attach as _attach, thread_local as _local
from .cpu_time import OnCpu, on_event_loop, settle
from .env import LOADPROBE_CPU_SAMPLE, LOADPROBE_DIR, cpu_sample_share
from .stages import stage_id

__all__ = ["Span", "in_request", "note_extract_error", "probe", "record_span", "recording", "request"]

_frame = ContextVar("loadprobe_frame", default=ROOT)
_frame_get = _frame.get
_frame_set = _frame.set
_frame_reset = _frame.reset

_span_ids = itertools.count(1)

# Recording state, switched by the recorder through activate()/deactivate().
_active = False
_env_pending = bool(os.environ.get(LOADPROBE_DIR))
# The share of units -- a request, or a span outside any -- whose spans time their thread's CPU too: chosen once
# per unit and carried in its frames (``buffers.ROOT``), so all of a sampled span's children are sampled too.
_cpu_share = cpu_sample_share(os.environ.get(LOADPROBE_CPU_SAMPLE))

_CO_GENERATOR, _CO_COROUTINE, _CO_ASYNC_GENERATOR = 0x20, 0x80, 0x200
_NO_EXTRAS = (None,) * 8  # batch, shape, engine, flops, bytes, queue_ns, tokens_in, tokens_out


if _env_pending:
    # Before the host's server installs its own handlers (gunicorn's uvicorn worker imports the
    # app, then serves): see exits.py. Standard library only, like this module.
    from . import exits as _exit

    _exit.install_signal_handlers()


# -- for adapters: the hot path's state, read without touching its internals ---------------

def recording() -> bool:
    """Whether spans are recorded now, or will be once the first probe starts the recorder that
    LOADPROBE_DIR asks for. Two global reads: cheap enough to ask per request or per call."""
    return _active or _env_pending


def in_request() -> bool:
    """Whether the caller runs inside an open request span (in this task, or the one it came from)."""
    return _frame_get()[0] is not None


note_extract_error = _buffers.note_extract_error  # the buffers own the counter; adapters import it from here


# -- switched by the recorder ---------------------------------------------------------

def activate(max_buffered_spans: int) -> None:
    """Start accepting spans; the process buffers at most ``max_buffered_spans`` of them."""
    global _active
    _buffers.set_budget(max_buffered_spans)
    _active = True


def rearm_env_start() -> None:
    """After an app's shutdown ended the environment's run: the next probe starts a new one."""
    global _env_pending
    _env_pending = True


def deactivate() -> None:
    """Stop accepting spans; probes fall back to a plain call."""
    global _active
    _active = False


# What starts a recorder from LOADPROBE_DIR: set by loadprobe.record's __init__, which runs
# before this module can be imported. The recorder switches this module on and off, so this
# module does not import it: the dependency runs one way, recorder -> probe.
env_start = None


def _start_from_env() -> bool:
    """First probe use with LOADPROBE_DIR set: start a recorder there. Returns whether recording."""
    global _env_pending
    _env_pending = False
    try:
        activate(DEFAULT_MAX_BUFFERED_SPANS)  # buffer at once: other threads' spans count from here
        env_start()
    except Exception:  # e.g. no new threads during interpreter shutdown: record nothing, raise nothing
        deactivate()
    return _active


def status_of(exc: BaseException) -> str:
    """Span status for an exception: ``timeout``, ``cancelled`` or ``error``."""
    for cls in type(exc).__mro__:
        # By name: asyncio's and concurrent.futures' TimeoutError are distinct classes before 3.11.
        if cls.__name__ == "TimeoutError":
            return "timeout"
        if cls.__name__ in ("CancelledError", "GeneratorExit"):
            return "cancelled"
    return "error"


def _evaluate(value, args, kwargs, buf: ThreadBuffer):
    """A constant, or a callable applied to the probed call's arguments; never raises."""
    if not callable(value):
        return value
    try:
        return value(*args, **kwargs)
    except Exception:
        buf.extract_errors += 1
        return None


class Span:
    """One timed stage. ``probe(...)`` and ``request(...)`` return one.

    As a context manager it times its block; set ``batch``, ``shape``, ``engine``,
    ``status``, ``flops``, ``bytes``, ``queue_ns``, ``tokens_in`` or ``tokens_out`` inside it
    (an LLM request's prompt and output tokens go on its request span). As a decorator it is a
    template: every call of the decorated function records a span of its own. A Span
    times one ``with`` block at a time: write ``with probe("nms")`` where the block is.
    """

    __slots__ = (
        "stage", "batch", "shape", "engine", "status", "flops", "bytes", "queue_ns", "tokens_in", "tokens_out",
        "_request", "_is_request", "_buf", "_t0", "_sid", "_parent", "_token", "_outer", "_cpu0", "_cpu_steps",
        "_cpu_held",
    )

    def __init__(
        self,
        stage: str | None = None,
        *,
        batch=None,
        shape=None,
        engine=None,
        flops=None,
        bytes=None,  # noqa: A002 - the public keyword is ``bytes``
        request_id=None,
        is_request: bool = False,
    ) -> None:
        self.stage = stage
        self.batch, self.shape, self.engine = batch, shape, engine
        self.flops, self.bytes = flops, bytes
        self.status = None
        self.queue_ns = self.tokens_in = self.tokens_out = None
        self._request = request_id
        self._is_request = is_request
        self._buf = None

    @property
    def start_ns(self) -> int | None:
        """When the open span started (``perf_counter_ns``); None when it is not open or nothing records.
        Markers timed from a request's start use it (``schema.FIRST_TOKEN``)."""
        return getattr(self, "_t0", None) if self._buf is not None else None

    def __repr__(self) -> str:
        kind = "request" if self._is_request else "probe"
        return f"<loadprobe {kind} {self.stage!r}>"

    # -- context manager -------------------------------------------------------------

    def open(self, attach: bool = True, cpu: str = "block") -> Span:
        """Start timing this span (a no-op when nothing records); ``with span:`` calls it.

        For a span that starts in one callback and ends in another -- an HTTP request whose body
        finishes later, as the ASGI and WSGI middlewares time it -- call ``open()`` and then,
        exactly once, ``close(exc_or_None)``.

        ``cpu``: how a sampled span times its CPU -- ``"thread"`` open to close, ``"steps"`` by ``cpu_time.OnCpu``,
        ``"block"`` as thread unless an event loop runs here (the loop runs other requests while a block awaits),
        ``None`` not at all (a generator: its consumer runs in between).
        """
        if not (_active or (_env_pending and _start_from_env())):
            self._buf = None
            return self
        try:
            buf = _local.buf
        except AttributeError:
            buf = _attach()
        self._buf = buf
        ctx = cur = _frame_get()
        outer = buf.frame
        if outer[1] > cur[1]:
            cur = outer
        sid = self._sid = next(_span_ids)
        timed = cur[2]
        if self._is_request:
            rid = self._request
            if callable(rid):
                rid = _evaluate(rid, (), {}, buf)
            if rid is None:
                rid = -sid  # negative: generated, formatted "<run>-<n>"; users' ids are kept as given
            self._parent = (rid, 0)
            timed = _random() < _cpu_share  # a request is a unit of its own
            frame = (rid, sid, timed)
        else:
            self._parent = cur
            if timed is None:
                timed = _random() < _cpu_share
            frame = (cur[0], sid, timed)
        self._outer = ctx
        self._token = _frame_set(frame) if attach else None
        if not self.stage:  # none, or an empty name (a stage named "" could be planned, verified by nothing)
            self.stage = _caller_name()
        self._cpu0 = self._cpu_steps = None
        if timed and cpu is not None:
            if cpu == "steps":
                self._cpu_steps = 0
            elif cpu == "thread" or not on_event_loop():
                self._cpu_held, buf.inner_cpu = buf.inner_cpu, 0
                self._cpu0 = _thread_ns()
        self._t0 = perf_counter_ns()
        return self

    def close(self, exc: BaseException | None = None) -> None:
        """Stop timing and record the span (status from ``exc``); never raises."""
        t1 = perf_counter_ns()
        buf = self._buf
        if buf is None:
            return
        self._buf = None
        token = self._token
        if token is not None:
            try:
                _frame_reset(token)
            except ValueError:  # closed in another context than it was opened in
                _frame_set(self._outer)
        status = str(self.status) if self.status else ("ok" if exc is None else status_of(exc))
        extras = (self.batch, self.shape, self.engine, self.flops, self.bytes, self.queue_ns, self.tokens_in,
                  self.tokens_out)
        if extras == _NO_EXTRAS:
            extras = None
        cpu = self._cpu_steps if self._cpu0 is None else self._own_cpu(buf)
        if cpu is None:
            record = (self._t0, t1, self._sid, self._parent, stage_id(str(self.stage)), status, extras)
        else:
            record = (self._t0, t1, self._sid, self._parent, stage_id(str(self.stage)), status, extras, cpu)
        if len(buf.spans) < buf.limit:
            buf.spans.append(record)
        else:
            _append(buf, record)

    def _own_cpu(self, buf: ThreadBuffer) -> int | None:
        """Its CPU from open to now less its sampled children's; None if closed on another thread than opened on."""
        if getattr(_local, "buf", None) is not buf:
            return None
        return settle(buf, self._cpu_held, _thread_ns() - self._cpu0)

    def __enter__(self) -> Span:
        return self.open()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close(exc)
        return False

    async def __aenter__(self) -> Span:
        return self.open(cpu=None)  # its block awaits: the loop runs other work on this thread meanwhile

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        self.close(exc)
        return False

    # -- decorator -------------------------------------------------------------------

    def _live(self, stage: str, args, kwargs, attach: bool = True, cpu: str | None = "thread") -> Span:
        """A fresh span for one call of a decorated function, extras taken from its arguments."""
        live = Span(stage, request_id=self._request, is_request=self._is_request)
        if _active or (_env_pending and _start_from_env()):
            buf = thread_buffer()
            live.batch = _evaluate(self.batch, args, kwargs, buf)
            live.shape = _evaluate(self.shape, args, kwargs, buf)
            live.engine = _evaluate(self.engine, args, kwargs, buf)
            live.flops = _evaluate(self.flops, args, kwargs, buf)
            live.bytes = _evaluate(self.bytes, args, kwargs, buf)
            if callable(self._request):
                live._request = _evaluate(self._request, args, kwargs, buf)
        return live.open(attach, cpu)

    def __call__(self, fn):
        stage = self.stage or getattr(fn, "__qualname__", None) or repr(fn)
        kind = _kind_of(fn)
        plain = (self.batch, self.shape, self.engine, self.flops, self.bytes) == (None,) * 5
        if kind == "sync" and plain and not self._is_request:
            wrapper = _fast_sync(fn, stage)
        elif kind == "sync":
            wrapper = _generic_sync(fn, stage, self)
        elif kind == "async":
            wrapper = _generic_async(fn, stage, self)
        elif kind == "generator":
            wrapper = _generator(fn, stage, self)
        else:
            wrapper = _async_generator(fn, stage, self)
        functools.update_wrapper(wrapper, fn)
        wrapper.__loadprobe_stage__ = stage
        return wrapper


def _caller_name() -> str:
    """Stage name for ``with probe()`` given none: the function that opened it."""
    frame = sys._getframe(3)  # _caller_name <- open <- __enter__ <- caller
    return getattr(frame.f_code, "co_qualname", frame.f_code.co_name)


def _kind_of(fn) -> str:
    code = getattr(fn, "__code__", None)
    if code is not None:
        flags = code.co_flags
    else:  # partials and callable objects: ask inspect, at decoration time only
        import inspect

        flags = (
            _CO_COROUTINE * inspect.iscoroutinefunction(fn)
            | _CO_ASYNC_GENERATOR * inspect.isasyncgenfunction(fn)
            | _CO_GENERATOR * inspect.isgeneratorfunction(fn)
        )
    if flags & _CO_COROUTINE:
        return "async"
    if flags & _CO_ASYNC_GENERATOR:
        return "async_generator"
    if flags & _CO_GENERATOR:
        return "generator"
    return "sync"


def _fast_sync(fn, stage_name: str):
    """The hot path: ``@probe`` on a plain function. Keep it lean; benchmarks/bench_probe.py watches it."""
    stage = stage_id(stage_name)

    def wrapper(*args, **kwargs):
        if _active or (_env_pending and _start_from_env()):
            try:
                buf = _local.buf
            except AttributeError:
                buf = _attach()
            outer = buf.frame
            cur = _frame_get()
            if outer[1] > cur[1]:
                cur = outer
            sid = next(_span_ids)
            timed = cur[2]
            if timed is None:  # a span outside any request: a unit of its own
                timed = _random() < _cpu_share
            buf.frame = (cur[0], sid, timed)
            if timed:
                return _on_cpu_call(fn, args, kwargs, buf, outer, cur, sid, stage)
            t0 = perf_counter_ns()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                t1 = perf_counter_ns()
                buf.frame = outer
                _append(buf, (t0, t1, sid, cur, stage, status_of(exc), None))
                raise
            t1 = perf_counter_ns()
            buf.frame = outer
            if len(buf.spans) < buf.limit:
                buf.spans.append((t0, t1, sid, cur, stage))
            else:
                _append(buf, (t0, t1, sid, cur, stage))  # reserve more room, or count the drop
            return result
        return fn(*args, **kwargs)

    return wrapper


def _on_cpu_call(fn, args, kwargs, buf: ThreadBuffer, outer, cur, sid: int, stage: int):
    """The fast path's call in a sampled unit: timed, and its own thread CPU too (``cpu_ns``: the CPU over the
    call less that of the sampled spans inside it, ``ThreadBuffer.inner_cpu``)."""
    held, buf.inner_cpu = buf.inner_cpu, 0
    c0 = _thread_ns()
    t0 = perf_counter_ns()
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        t1 = perf_counter_ns()
        own = settle(buf, held, _thread_ns() - c0)
        buf.frame = outer
        _append(buf, (t0, t1, sid, cur, stage, status_of(exc), None, own))
        raise
    t1 = perf_counter_ns()
    own = settle(buf, held, _thread_ns() - c0)
    buf.frame = outer
    _append(buf, (t0, t1, sid, cur, stage, "ok", None, own))
    return result


# One wrapper per calling convention -- call, await, yield from, async iteration -- each the
# same open/close around a different way of running ``fn``: Python cannot share that body
# between them without an extra frame or coroutine per call on the host's path.
def _generic_sync(fn, stage: str, template: Span):
    def wrapper(*args, **kwargs):
        span = template._live(stage, args, kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            span.close(exc)
            raise
        span.close(None)
        return result

    return wrapper


def _generic_async(fn, stage: str, template: Span):
    async def wrapper(*args, **kwargs):
        span = template._live(stage, args, kwargs, cpu="steps")
        try:
            if span._buf is not None and span._cpu_steps is not None:
                result = await OnCpu(fn(*args, **kwargs), span)
            else:
                result = await fn(*args, **kwargs)
        except BaseException as exc:
            span.close(exc)
            raise
        span.close(None)
        return result

    return wrapper


def _generator(fn, stage: str, template: Span):
    # A generator is suspended while its consumer runs, so it must not become the parent
    # of the consumer's spans: it is timed from first resume to the end, attached to nothing.
    def wrapper(*args, **kwargs):
        span = template._live(stage, args, kwargs, attach=False, cpu=None)
        try:
            result = yield from fn(*args, **kwargs)
        except BaseException as exc:
            span.close(exc)
            raise
        span.close(None)
        return result

    return wrapper


def _async_generator(fn, stage: str, template: Span):
    async def wrapper(*args, **kwargs):
        span = template._live(stage, args, kwargs, attach=False, cpu=None)
        agen = fn(*args, **kwargs)
        failure = None
        try:
            sent, thrown = None, None
            while True:
                try:
                    item = await (agen.asend(sent) if thrown is None else agen.athrow(thrown))
                except StopAsyncIteration:
                    break
                sent, thrown = None, None
                try:
                    sent = yield item
                except GeneratorExit:
                    await agen.aclose()
                    raise
                except BaseException as exc:  # thrown in by the consumer: pass it on
                    thrown = exc
        except BaseException as exc:
            failure = exc
            raise
        finally:
            span.close(failure)

    return wrapper


def probe(stage=None, /, *, batch=None, shape=None, engine=None, flops=None, bytes=None):  # noqa: A002
    """Time a stage of the service.

    ``@probe`` (stage = the function's qualified name), ``@probe("backbone")``,
    ``@probe("backbone", batch=lambda x: x.shape[0], shape=lambda x: x.shape,
    engine="npu", flops=..., bytes=...)`` on sync and async functions and generators, or
    ``with probe("nms") as span: span.batch = len(boxes)``. ``batch``, ``shape``,
    ``engine``, ``flops`` and ``bytes`` take a constant or a callable that receives the
    decorated function's arguments. Exceptions pass through unchanged and mark the span
    ``error`` (``timeout`` for timeout errors, ``cancelled`` for cancellation).
    With no recorder started, a probe is a plain call.
    """
    if callable(stage) and not isinstance(stage, str):
        return Span(None, batch=batch, shape=shape, engine=engine, flops=flops, bytes=bytes)(stage)
    return Span(stage, batch=batch, shape=shape, engine=engine, flops=flops, bytes=bytes)


def request(id=None, *, name: str = "request"):  # noqa: A002 - public keyword
    """One request of the service: the root span its stages attach to.

    ``@request()`` on a handler (sync or async) or ``with request(id=req_id):``. ``id`` is a
    string, a callable receiving the handler's arguments, or None for a generated id that
    is unique within the recording. Probes called while it is open -- in the same task,
    in tasks it creates and in ``asyncio.to_thread`` -- carry its request id.
    """
    return Span(name, request_id=id, is_request=True)



def record_span(stage: str, start_ns: int, end_ns: int, *, status: str = "ok", batch=None, shape=None,
                engine=None, flops=None, bytes=None, queue_ns=None, request_id=None, parent: int | None = None,  # noqa: A002
                tokens_in=None, tokens_out=None) -> int | None:
    """Record a stage that was timed elsewhere, as a child of the innermost open span; returns its span id
    (None when nothing records).

    For work done once on behalf of several requests -- a dynamic batcher runs the
    backbone once for N queued requests -- each request records the shared execution
    with the batcher's ``perf_counter_ns()`` readings::

        record_span("backbone", t0, t1, batch=len(batch), queue_ns=t0 - enqueued,
                    flops=batch_flops if first else None)

    Give the batch's FLOPs and bytes on one member only, so achieved FLOP/s counts the
    execution once. With ``request_id`` the span is instead the root of that request (a
    load generator records each request it sent this way, under the id it sent); with
    ``request_id`` and ``parent`` (an id this returned) it is a child of that span, in that
    request -- how a request timed after the fact gets spans under it::

        root = record_span("client", t0, t3, request_id="run-7", tokens_in=128, tokens_out=32)
        record_span(FIRST_TOKEN, t0, t1, request_id="run-7", parent=root)

    ``tokens_in`` and ``tokens_out``: an LLM request's prompt and output tokens. Like a probe it
    never raises and records nothing when not recording.
    """
    if not (_active or (_env_pending and _start_from_env())):
        return
    try:
        buf = _local.buf
    except AttributeError:
        buf = _attach()
    if request_id is not None:
        cur = (request_id, 0 if parent is None else parent, None)
    else:
        cur = _frame_get()
        outer = buf.frame
        if outer[1] > cur[1]:
            cur = outer
    extras = (batch, shape, engine, flops, bytes, queue_ns, tokens_in, tokens_out)
    sid = next(_span_ids)
    try:
        if type(start_ns) is not int or type(end_ns) is not int:
            start_ns, end_ns = int(start_ns), int(end_ns)
        if extras == _NO_EXTRAS and status == "ok":  # the plain form, as a @probe's (an LLM engine's markers)
            record = (start_ns, end_ns, sid, cur, stage_id(stage if type(stage) is str else str(stage)))
        else:
            record = (start_ns, end_ns, sid, cur, stage_id(str(stage)), str(status),
                      None if extras == _NO_EXTRAS else extras)
    except (TypeError, ValueError):
        buf.extract_errors += 1
        return None
    if len(buf.spans) < buf.limit:
        buf.spans.append(record)
    else:
        _append(buf, record)  # reserve more room, or count the drop
    return sid
