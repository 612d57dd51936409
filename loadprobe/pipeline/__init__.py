"""pipeline.yaml: the plan as a file, what ``loadprobe recommend`` writes and ``loadprobe.route``
and ``loadprobe.simulator`` read: ``config = loadprobe.pipeline.load("pipeline.yaml")``."""

from .._lazy import forward

__getattr__ = forward(__name__, "config")
