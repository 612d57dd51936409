"""``loadprobe.route``: the runtime that executes a pipeline.yaml with your engine callables.

Usage::

    from loadprobe.route import Rejected, Router

    router = Router.load("pipeline.yaml", executors={"backbone": {"npu0": run_npu, "gpu0": run_gpu}, ...})
    async with router:
        result = await router.submit(payload, priority=1)
    router.metrics()

Every rule (admission and shedding, batching, failover cap, breaker, retry budget, canary) is a
pure object of ``loadprobe.route.policy``, which the simulator asks too.
Reference: docs/route.md; the file's semantics: docs/pipeline.md.
"""

from .errors import Rejected
from .router import Router

__all__ = ["Rejected", "Router"]
