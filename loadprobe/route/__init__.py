"""``loadprobe.route``: the runtime that executes a pipeline.yaml with your engine callables.

Usage::

    from loadprobe.route import Rejected, Router

    router = Router.load("pipeline.yaml", executors={"backbone": {"npu0": run_npu, "gpu0": run_gpu}, ...})
    async with router:
        result = await router.submit(payload, priority=1)
    router.metrics()

The rules (failover cap, breaker, retry budget, priority shedding) are plain objects in
``loadprobe.route.policy``, shared with anything else that replays a pipeline.
Reference: docs/route.md; the file's semantics: docs/pipeline.md.
"""

from .errors import Rejected
from .router import Router

__all__ = ["Rejected", "Router"]
