"""The Python module of an exported Ray Serve application: a deployment per stage and the ingress.

    text = module_text(config, deployments, ingress)     # the source of <name>_serve.py

``deployments`` are ``rayserve.Deployment``s (read here by attribute only). The module written
needs ray[serve] and loadprobe where it runs, never here: the ingress asks loadprobe's own
routing rules (``loadprobe.route.policy``: the failover cap, breakers, retry budget) the very
questions the Router asks, so a rule keeps one implementation.
"""

from __future__ import annotations

import re

from .._version import __version__
from ..pipeline.config import PipelineConfig
from ..pipeline.files import dump

__all__ = ["module_text"]

_HEADER = '''\
"""Ray Serve application of plan {service!r}, written by `loadprobe export --to ray-serve` (loadprobe {version}).

    PYTHONPATH="$PWD:<your executors' folder>" serve run serve_config.yaml     # from this folder (README.md)
    curl -d '{{"x": 1}}' http://127.0.0.1:8000{prefix}

One deployment per stage (and per fallback engine) calls the executor named by import path, the
way loadprobe's Router does: a batched stage gets a list and returns a list of as many results,
`async def` executors are awaited. The ingress `{ingress}` takes a JSON body, passes it through the
stages in the plan's order and answers the last stage's result as JSON; 503 when a stage rejects
it (queue full, breaker open, failover cap), 504 when a stage passes its timeout_ms, 500 when an
executor raises, each naming the stage and engine. From Python:
`serve.get_app_handle({app!r}).submit.remote(payload)`.

Regenerate with `loadprobe export` rather than edit: the numbers come from the plan below.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import time

from ray import serve
from ray.serve.exceptions import BackPressureError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loadprobe.pipeline import loads
from loadprobe.route.policy import PipelineRules

PLAN = {plan}
'''

_RUNTIME = '''

def _load(path):
    module, _, name = path.partition(":")
    target = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


class Rejected(Exception):
    """A stage turned the request away: reason queue_full, breaker_open or failover_cap."""

    def __init__(self, reason, stage, engine):
        super().__init__(f"rejected ({{reason}}) at stage {{stage!r}} on engine {{engine!r}}")
        self.reason, self.stage, self.engine = reason, stage, engine

    def __reduce__(self):
        return type(self), (self.reason, self.stage, self.engine)


class StageTimeout(TimeoutError):
    """An attempt of a stage did not finish within the stage's timeout_ms (queueing included)."""

    def __init__(self, stage, engine, timeout_ms):
        super().__init__(f"stage {{stage!r}} on engine {{engine!r}} did not finish within its {{timeout_ms:g}} ms "
                         f"timeout")
        self.stage, self.engine, self.timeout_ms = stage, engine, timeout_ms

    def __reduce__(self):
        return type(self), (self.stage, self.engine, self.timeout_ms)


class StageFailed(Exception):
    """A stage's executor raised; ``kind`` is its exception's type name."""

    def __init__(self, stage, engine, kind, message):
        super().__init__(f"stage {{stage!r}} on engine {{engine!r}}: {{kind}}: {{message}}")
        self.stage, self.engine, self.kind, self.message = stage, engine, kind, message

    def __reduce__(self):
        return type(self), (self.stage, self.engine, self.kind, self.message)


class _Sent:
    """What the ingress sees of a stage's deployments (a loadprobe.route.policy.QueueView): the requests
    it has sent them beyond what their replicas run at once. Whether they take one more, Ray Serve
    says only on sending (BackPressureError): the ingress then asks the rules (StageRules.overflowed)."""

    def __init__(self, capacity):
        self.in_flight, self.capacity = 0, capacity

    @property
    def waiting(self):
        return self.in_flight - self.capacity

    def admits(self, priority):
        return True


class _Stage:
    """One stage on one engine: its executor, called the Router's way."""

    def __init__(self, stage, engine, path):
        if not path:
            raise LookupError(f"stage {{stage!r}} on engine {{engine!r}} has no executor: export again with "
                              f"--executor {{stage}}=MODULE:NAME (or {{stage}}@{{engine}}=MODULE:NAME)")
        self.stage, self.engine = stage, engine
        self.executor = _load(path)
        self.is_async = inspect.iscoroutinefunction(self.executor) or inspect.iscoroutinefunction(
            getattr(self.executor, "__call__", None))

    async def call(self, argument):
        if self.is_async:
            return await self.executor(argument)
        return await asyncio.to_thread(self.executor, argument)  # a plain function must not block the replica

    async def call_batch(self, payloads):
        results = list(await self.call(list(payloads)))
        if len(results) != len(payloads):
            raise ValueError(f"the executor of stage {{self.stage!r}} returned {{len(results)}} results for a batch "
                             f"of {{len(payloads)}}")
        return results
'''

_INGRESS = '''

{decorator}
class {cls}:
    """The pipeline: each request through the stages in order, by the plan's rules."""

    def __init__(self, stages):
        self.handles = stages                      # {{stage: {{engine: DeploymentHandle}}}}
        self.config = loads(PLAN, "pipeline.yaml")
        self.rules = PipelineRules(self.config, window_s=self.config.window_s, clock=time.monotonic)
        self.queues = {{stage.name: _Sent(CAPACITY[stage.name]) for stage in self.config.stages}}

    async def submit(self, payload):
        """The last stage's result for ``payload``; or Rejected, StageTimeout or StageFailed."""
        self.rules.note_request()
        for rules in self.rules.stages:
            payload = await self._stage(rules, payload)
        return payload

    async def __call__(self, request: Request):
        try:
            payload = json.loads(await request.body())
        except ValueError:
            return JSONResponse({{"error": "bad_request", "message": "the request body is not JSON"}}, status_code=400)
        try:
            result = await self.submit(payload)
        except Rejected as exc:
            return JSONResponse({{"error": "rejected", "reason": exc.reason, "stage": exc.stage, "engine": exc.engine,
                                 "message": str(exc)}}, status_code=503)
        except StageTimeout as exc:
            return JSONResponse({{"error": "timeout", "stage": exc.stage, "engine": exc.engine,
                                 "message": str(exc)}}, status_code=504)
        except StageFailed as exc:
            return JSONResponse({{"error": "failed", "stage": exc.stage, "engine": exc.engine, "type": exc.kind,
                                 "message": str(exc)}}, status_code=500)
        try:
            body = json.dumps(result)
        except (TypeError, ValueError) as exc:
            return JSONResponse({{"error": "failed", "stage": self.config.stages[-1].name, "type": "TypeError",
                                 "message": f"the last stage's result is not JSON: {{exc}}"}}, status_code=500)
        return Response(body, media_type="application/json")

    async def _stage(self, rules, payload):
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._attempt(rules, payload)
            except (StageTimeout, StageFailed):
                if not rules.may_retry(attempt):    # within the stage's attempts and the retry budget
                    raise

    async def _attempt(self, rules, payload):
        # Every decision is loadprobe's Router's own (loadprobe.route.policy.StageRules): where the
        # attempt goes, what a full deployment means, what the breaker hears.
        stage, queue = rules.config, self.queues[rules.config.name]
        action, reason = rules.steer(queue, 0)
        if action == "run":
            queue.in_flight += 1
            try:
                result = await self._call(rules, stage.engine, payload)
            except BackPressureError:               # the deployment's queue is full
                action, reason = rules.overflowed()
            except (StageTimeout, StageFailed):
                rules.record(False)
                raise
            else:
                rules.record(True)
                return result
            finally:
                queue.in_flight -= 1
        if action == "move":
            return await self._moved(rules, payload)
        raise Rejected(reason, stage.name, stage.engine)

    async def _moved(self, rules, payload):
        # One hop: a request moved to the fallback engine runs there or fails, never moves again.
        engine = rules.config.fallback.engine
        try:
            return await self._call(rules, engine, payload)
        except BackPressureError:
            raise Rejected("queue_full", rules.config.name, engine) from None

    async def _call(self, rules, engine, payload):
        name = rules.config.name
        response = self.handles[name][engine].remote(payload)
        try:
            return await asyncio.wait_for(_result(response), rules.timeout_s)
        except BackPressureError:
            raise
        except Exception as exc:
            cause = getattr(exc, "cause", None)  # a RayTaskError carries the executor's own exception
            if cause is None and isinstance(exc, asyncio.TimeoutError):
                response.cancel()
                raise StageTimeout(name, engine, rules.config.timeout_ms) from None
            cause = cause or exc
            raise StageFailed(name, engine, type(cause).__name__, str(cause) or "(no message)") from None


async def _result(response):
    return await response
'''


def _plan_literal(text: str) -> str:
    # Readable as YAML where it can be; repr() where the text could end the string early.
    if '"""' not in text and "\\" not in text and not text.endswith('"'):
        return '"""\\\n' + text + '"""'
    return repr(text)


def _decorator(options: dict) -> str:
    inner = ", ".join(f"{key}={value!r}" for key, value in options.items())
    return f"@serve.deployment({inner})"


def _stage_class(d) -> str:
    head = (f"\n\n{_decorator(d.options)}\nclass {d.cls}(_Stage):\n"
            f"    \"\"\"Stage {d.placement.stage.name!r} on engine {d.placement.engine_name!r}"
            f"{'' if d.placement.primary else ' (its fallback)'}.\"\"\"\n\n"
            f"    def __init__(self):\n"
            f"        super().__init__({d.placement.stage.name!r}, {d.placement.engine_name!r}, {d.executor!r})\n\n")
    if d.batch is None:
        return head + "    async def __call__(self, payload):\n        return await self.call(payload)\n"
    size, wait_s, concurrent = d.batch
    return head + (f"    @serve.batch(max_batch_size={size}, batch_wait_timeout_s={wait_s!r}, "
                   f"max_concurrent_batches={concurrent})\n"
                   f"    async def __call__(self, payloads):\n        return await self.call_batch(payloads)\n")


def module_text(config: PipelineConfig, deployments: list, ingress) -> str:
    """The generated module: header and plan, the runtime helpers, one class per deployment, ``app``."""
    capacity = {d.placement.stage.name: d.options["num_replicas"] * d.options["max_ongoing_requests"]
                for d in deployments if d.placement.primary}
    parts = [_HEADER.format(service=config.service, version=__version__, prefix=ingress.route_prefix,
                            ingress=ingress.cls, app=ingress.app, plan=_plan_literal(dump(config))),
             "# What the stage deployments run at once (num_replicas x max_ongoing_requests): beyond it a request "
             "waits.\n" f"CAPACITY = {capacity!r}\n",
             _RUNTIME.format()]
    parts += [_stage_class(d) for d in deployments]
    parts.append(_INGRESS.format(decorator=_decorator(ingress.options), cls=ingress.cls))
    tree: dict[str, list[str]] = {}
    for d in deployments:
        tree.setdefault(d.placement.stage.name, []).append(f"{d.placement.engine_name!r}: {d.cls}.bind()")
    bound = ",\n    ".join(f"{stage!r}: {{{', '.join(items)}}}" for stage, items in tree.items())
    parts.append(f"\n\napp = {ingress.cls}.bind({{\n    {bound},\n}})\n")
    return re.sub(r"\n{3,}(?=\S)", "\n\n\n", "".join(parts))
