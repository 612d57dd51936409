"""``Router``: runs requests through the stages of a pipeline.yaml, on the engines it names.

The pipeline file says which engine runs each stage and by what rules (queues, batches,
timeouts, fallback, breakers, retries, shedding, the canary); the executors the user passes
make the engines real. Every rule's parameters come from the file (docs/pipeline.md); every
decision is asked of ``loadprobe.route.policy`` (``PipelineRules`` here, ``Slots`` in the
engines' lanes), the same objects the simulator asks. This module carries requests through
the stages on the event loop.

Usage::

    from loadprobe.route import Rejected, Router

    router = Router.load("pipeline.yaml", executors={
        "preprocess": {"cpu": preprocess},                 # sync: runs on the engine's worker threads
        "backbone": {"npu0": npu_batch, "gpu0": gpu_batch}, # batched stage: list in, list out
        "head": {"gpu0": head_async},                      # async def: awaited on the router's loop
    })
    async with router:
        try:
            boxes = await router.submit(jpeg, priority=1)
        except Rejected as exc:
            ...  # exc.reason, exc.retry_after_ms

    with router:                                           # threaded servers: a loop of its own
        boxes = router.submit_sync(jpeg)
    router.metrics()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..record import probe as _probe
from .._errors import LoadprobeError
from ..pipeline.config import PipelineConfig, StageConfig
from ..pipeline.files import load as load_pipeline
from .errors import Rejected
from .lanes import EngineLanes, Lane
from .policy import LaneQueue, PipelineRules, StageRules

__all__ = ["Router"]

log = logging.getLogger("loadprobe.route")

Executors = Mapping[str, Mapping[str, Callable]]

# Where a submit_sync() request is, [stage, engine], so that its caller's timeout can say so.
_where: contextvars.ContextVar[list | None] = contextvars.ContextVar("loadprobe_route_where", default=None)


def _note(stage: str, engine: str) -> None:
    where = _where.get()
    if where is not None:
        where[:] = (stage, engine)


@dataclass
class _Stage:
    """A stage at run time: where it runs, where it may move, the rules that decide, and its counts."""

    config: StageConfig
    rules: StageRules
    engine: EngineLanes
    lane: Lane
    fallback_engine: EngineLanes | None = None
    fallback_lane: Lane | None = None
    failovers: int = 0
    retries: int = 0
    routed: int = 0  # requests sent to the fallback for their shape or precision (not capped)

    def __post_init__(self) -> None:
        self.queue = LaneQueue(self.engine, self.lane)  # what steering sees of the engine


class Router:
    """Executes a PipelineConfig: ``await submit(payload)`` runs it through every stage in order.

    ``window_s`` is the sliding window over which the router counts the failover share of
    each stage, the retry budget and the engines' metrics (breakers use their own
    ``window_s`` from the file); default: the file's ``routing.window_s``, else 10 s.
    ``clock`` (seconds, monotonic) is for tests.
    """

    def __init__(self, config: PipelineConfig, executors: Executors, *, window_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, base_dir: str | os.PathLike | None = None) -> None:
        self.config = config
        _check_executors(config, executors)
        window_s = config.window_s if window_s is None else window_s
        self._rules = rules = PipelineRules(config, window_s=window_s, clock=clock)
        self._engines = {name: EngineLanes(name, engine, window_s=window_s, shed_by=rules.shed_by, clock=clock)
                         for name, engine in config.engines.items()}
        self._stages = [self._build_stage(stage, stage_rules, executors)
                        for stage, stage_rules in zip(config.stages, rules.stages)]
        self._canary = rules.canary
        self.canary: Router | None = None
        if rules.canary is not None:
            path = Path(base_dir or ".") / config.routing.canary.config
            self.canary = Router.load(path, executors, window_s=window_s, clock=clock, with_canary=False)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._sync_tasks: set[asyncio.Task] = set()  # submit_sync() requests in progress
        self._counts = {"submitted": 0, "ok": 0, "rejected": 0, "failed": 0}

    @classmethod
    def load(cls, source: str | os.PathLike | PipelineConfig, executors: Executors, *,
             with_canary: bool = True, **options: Any) -> Router:
        """A router for a pipeline file (or YAML text, or a PipelineConfig); ``routing.canary`` paths
        are read relative to the file. ``with_canary=False`` ignores the canary."""
        if isinstance(source, PipelineConfig):
            config = source
        else:
            config = load_pipeline(source)
            if "base_dir" not in options and not (isinstance(source, str) and "\n" in source):
                options["base_dir"] = Path(source).parent
        if not with_canary and config.routing and config.routing.canary:
            from dataclasses import replace

            config = replace(config, routing=replace(config.routing, canary=None))
        return cls(config, executors, **options)

    def _build_stage(self, stage: StageConfig, rules: StageRules, executors: Executors) -> _Stage:
        engine = self._engines[stage.engine]
        built = _Stage(stage, rules, engine, engine.add_lane(stage, executors[stage.name][stage.engine]))
        if stage.fallback:
            built.fallback_engine = self._engines[stage.fallback.engine]
            built.fallback_lane = built.fallback_engine.add_lane(stage, executors[stage.name][stage.fallback.engine])
        return built

    # -- life cycle ----------------------------------------------------------------------------------------

    async def __aenter__(self) -> Router:
        self._bind(asyncio.get_running_loop())
        if self.canary is not None:
            await self.canary.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> None:
        self._shut()
        if self.canary is not None:
            await self.canary.__aexit__(*exc_info)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._check_unused()
        self._loop = loop
        for engine in self._engines.values():
            engine.bind(loop)

    def _shut(self) -> None:
        if self._closed:
            return
        self._closed = True
        for engine in self._engines.values():
            engine.close()
        abandoned = [(stage, engine.name, n) for engine in self._engines.values()
                     for stage, n in engine.abandoned.items()]
        if abandoned:  # once per router: the calls are not waited for, so this is the only trace of them
            where = ", ".join(f"stage {stage!r} on engine {engine!r}: {n}" for stage, engine, n in abandoned)
            log.warning("%s: the router closed with %d executor call(s) still running on its worker threads (%s); "
                        "they are abandoned, not waited for, and a result that comes later is dropped",
                        self.config.service, sum(n for *_, n in abandoned), where)

    def _check_unused(self) -> None:
        """A Router runs once, on one event loop: say so to a second ``async with`` or ``start()``."""
        if self._closed:
            raise RuntimeError("this Router is closed, and a Router runs only once: create a new one "
                               "(Router.load(...) or Router(config, executors)) to route again")
        if self._loop is not None:
            raise RuntimeError("this Router is already running; a Router runs once, on one event loop")

    def _not_running(self) -> Rejected:
        if self._closed:
            return Rejected("closed", detail="this Router is closed; create a new Router to send more requests")
        return Rejected("closed", detail="this Router is not running yet: use `async with router:`, "
                                         "`with router:` or router.start() first")

    def start(self) -> Router:
        """Run the router on an event loop of its own, in a background thread (for ``submit_sync``)."""
        self._check_unused()  # before the thread exists, so that a refusal leaves nothing running
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="loadprobe-route", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.__aenter__(), loop).result()
        return self

    def close(self) -> None:
        """Stop the router; every request still in it ends with ``Rejected("closed")`` (docs/route.md).

        With ``start()``, also stops its loop once the ``submit_sync()`` callers have their answers.
        """
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            self._shut()
            return
        asyncio.run_coroutine_threadsafe(self._close_on_loop(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
        self._thread = None

    async def _close_on_loop(self) -> None:
        await self.__aexit__(None, None, None)
        # The loop stops next, and submit_sync() callers wait on its tasks. Closing answered every
        # request waiting or running on an engine: give those turns of the loop to hand the answer
        # over while any still ends, then cancel the rest (requests inside an inline async executor,
        # whose callers get Rejected("closed")), as close cancels every async execution.
        pending = self._sync_tasks | {task for engine in self._engines.values() for task in engine.tasks}
        while pending:
            await asyncio.sleep(0)
            still = {task for task in pending if not task.done()}
            if len(still) == len(pending):
                break
            pending = still
        for task in pending:
            task.cancel()
        if pending:  # bounded: an executor that ignores cancellation must not keep close() waiting
            await asyncio.wait(pending, timeout=max(stage.rules.timeout_s for stage in self._stages))

    def __enter__(self) -> Router:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------------------------

    async def submit(self, payload: Any, priority: int = 0, shape: Any = None, *,
                     precision: str | None = None) -> Any:
        """Run ``payload`` through every stage; the last stage's result.

        Raises ``Rejected`` (fast, with ``reason`` and ``retry_after_ms``), ``TimeoutError`` when
        a stage's last attempt passed its ``timeout_ms`` (its message names the stage, engine and
        limit), or the executor's own exception (given a message if it had none).
        Higher ``priority`` is served first and shed last. ``shape`` (the request's input shape)
        and ``precision`` (the lowest it accepts, e.g. "fp16") send a stage whose engine does not
        take them to its fallback engine -- routing, not overflow: the failover cap does not apply.
        """
        if self._loop is None or self._closed:
            raise self._not_running()
        if self._canary is not None and self._canary.take():
            return await self.canary.submit(payload, priority, shape, precision=precision)
        counts = self._counts
        counts["submitted"] += 1
        self._rules.note_request()
        try:
            if _probe.recording() and not _probe.in_request():
                with _probe.request():  # the root span the stage spans attach to, unless the caller has one
                    result = await self._through(payload, priority, shape, precision)
            else:
                result = await self._through(payload, priority, shape, precision)
        except Rejected:
            counts["rejected"] += 1
            raise
        except asyncio.CancelledError:
            counts["rejected" if self._closed else "failed"] += 1  # cut off by close(): its caller gets "closed"
            raise
        except BaseException:
            counts["failed"] += 1
            raise
        counts["ok"] += 1
        return result

    async def _through(self, payload: Any, priority: int, shape: Any = None, precision: str | None = None) -> Any:
        for stage in self._stages:
            payload = await self._stage(stage, payload, priority, shape, precision)
        return payload

    async def _stage(self, stage: _Stage, payload: Any, priority: int, shape: Any = None,
                     precision: str | None = None) -> Any:
        routed = (shape is not None or precision is not None) and not stage.rules.fits(shape, precision)
        if routed and stage.fallback_engine is None:
            raise stage.engine.reject("unsupported", stage.lane)
        _note(stage.config.name, stage.engine.name)
        attempt = 1
        while True:
            try:
                if routed:
                    stage.routed += 1
                    _note(stage.config.name, stage.fallback_engine.name)
                    return await stage.fallback_engine.run(stage.fallback_lane, payload, priority)
                return await self._attempt(stage, payload, priority)
            except Rejected:
                raise  # retrying into a full queue only adds load
            except Exception:
                if not stage.rules.may_retry(attempt):
                    raise
                attempt += 1
                stage.retries += 1

    async def _attempt(self, stage: _Stage, payload: Any, priority: int) -> Any:
        rules, engine, lane = stage.rules, stage.engine, stage.lane
        action, reason = rules.steer(stage.queue, priority)
        if action == "reject":
            raise engine.reject(reason, lane)
        if action == "move":
            return await self._move(stage, payload, priority)
        if rules.breaker is None:
            return await engine.run(lane, payload, priority)
        try:
            result = await engine.run(lane, payload, priority)
        except Exception as exc:
            if isinstance(exc, Rejected):
                rules.release()
            else:
                rules.record(ok=False)
            raise
        except BaseException:
            rules.release()
            raise
        rules.record(ok=True)
        return result

    async def _move(self, stage: _Stage, payload: Any, priority: int) -> Any:
        # One hop: the fallback engine runs it or it fails; it is never moved again.
        stage.failovers += 1
        _note(stage.config.name, stage.fallback_engine.name)
        return await stage.fallback_engine.run(stage.fallback_lane, payload, priority)

    def submit_sync(self, payload: Any, priority: int = 0, shape: Any = None, timeout: float | None = None, *,
                    precision: str | None = None) -> Any:
        """``submit`` from a thread that is not the router's: blocks until the request ends.

        The router must be running (``with router:``, ``router.start()``, or ``async with`` on a
        loop in another thread). The caller's loadprobe request, if one is open, is carried over.
        ``timeout`` (seconds) stops waiting, not the request: a TimeoutError that names the
        stage and engine the request was at.
        """
        loop = self._loop
        if loop is None or self._closed:
            raise self._not_running()
        if _running_loop() is loop:
            raise RuntimeError("submit_sync() would block the router's own event loop; use await router.submit()")
        done: concurrent.futures.Future = concurrent.futures.Future()
        where: list = []

        def begin() -> None:
            _where.set(where)  # in the copied context below: the task sees it, the caller's thread does not
            task = loop.create_task(self.submit(payload, priority, shape, precision=precision))
            self._sync_tasks.add(task)
            task.add_done_callback(self._sync_tasks.discard)
            task.add_done_callback(lambda t: _settle(done, t, where))

        loop.call_soon_threadsafe(begin, context=contextvars.copy_context())
        if not concurrent.futures.wait([done], timeout).done:
            at = (f"it was at stage {where[0]!r} on engine {where[1]!r}" if where
                  else "it had not reached its first stage")
            raise TimeoutError(f"submit_sync() stopped waiting after its {timeout:g} s timeout; {at}, and goes on "
                               f"in the router")
        return done.result()

    # -- observability -------------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Per engine: queue length, processing latency, error rate, utilisation (over ``window_s``),
        and counts; per stage: failovers, failover share, breaker state, retries; router totals."""
        loop = self._loop
        if loop is not None and loop.is_running() and _running_loop() is not loop and not loop.is_closed():
            # the counters belong to the loop's thread: read them there
            return asyncio.run_coroutine_threadsafe(_call(self._metrics_now), loop).result()
        return self._metrics_now()

    def _metrics_now(self) -> dict[str, Any]:
        engines = {name: engine.metrics() for name, engine in self._engines.items()}
        stages = {}
        for stage in self._stages:
            stages[stage.config.name] = {
                "engine": stage.engine.name,
                "fallback": stage.fallback_engine.name if stage.fallback_engine else None,
                "failovers": stage.failovers,
                "failover_share": stage.rules.cap.share() if stage.rules.cap else 0.0,
                "breaker": stage.rules.breaker.state.value if stage.rules.breaker else None,
                "breaker_opened": stage.rules.breaker.opened_count if stage.rules.breaker else 0,
                "retries": stage.retries,
                "routed_by_shape_or_precision": stage.routed,
            }
        rejects: dict[str, int] = {}
        for engine in engines.values():
            for reason, n in engine["rejected"].items():
                rejects[reason] = rejects.get(reason, 0) + n
        abandoned = sum(n for engine in engines.values() for n in engine["abandoned_at_close"].values())
        late = sum(engine["late_results"] for engine in engines.values())
        counts = dict(self._counts)
        counts["in_flight"] = counts["submitted"] - counts["ok"] - counts["rejected"] - counts["failed"]
        out = {
            "requests": counts,
            "engines": engines,
            "stages": stages,
            "failovers": sum(s["failovers"] for s in stages.values()),
            "abandoned_at_close": abandoned,  # sync executor calls still running when the router closed
            "late_results": late,  # results of those that came afterwards, dropped
            "rejects": rejects,
            "retries": {"allowed": self._rules.budget.taken_total, "denied": self._rules.budget.denied_total}
            if self._rules.budget else {"allowed": sum(s["retries"] for s in stages.values()), "denied": 0},
        }
        if self.canary is not None:
            out["canary"] = {"weight": self._canary.weight, "sent": self._canary.sent,
                             "metrics": self.canary._metrics_now()}
        return out

    def serve_metrics(self, port: int, addr: str = "127.0.0.1"):
        """Serve ``metrics()`` in the Prometheus text format on ``addr:port`` (needs prometheus_client)."""
        from .prometheus import serve

        return serve(self, port, addr)


def _check_executors(config: PipelineConfig, executors: Executors) -> None:
    """Every engine a stage may run on needs an executor; say exactly which are missing."""
    missing = []
    for stage in config.stages:
        wanted = [stage.engine] + ([stage.fallback.engine] if stage.fallback else [])
        have = executors.get(stage.name, {})
        missing += [f"{stage.name}.{engine}" for engine in wanted if not callable(have.get(engine))]
    unknown = sorted(set(executors) - {s.name for s in config.stages})
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"no executor for {', '.join(missing)} (stage.engine)")
        if unknown:
            parts.append(f"executors for unknown stages: {', '.join(unknown)}")
        raise LoadprobeError(f"{config.service}: {'; '.join(parts)}; pass executors={{stage: {{engine: callable}}}} "
                             f"covering every stage's engine and fallback engine")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(done: concurrent.futures.Future, task: asyncio.Task, where: list) -> None:
    if task.cancelled():  # only close() cancels these tasks
        stage, engine = where or (None, None)
        done.set_exception(Rejected("closed", stage=stage, engine=engine, detail="the router closed while it ran"))
    elif task.exception() is not None:
        done.set_exception(task.exception())
    else:
        done.set_result(task.result())


async def _call(fn: Callable[[], Any]) -> Any:
    return fn()
