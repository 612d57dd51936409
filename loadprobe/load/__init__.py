"""Load generation: arrival schedules and the open-loop HTTP client that keeps to them.

``loadprobe.load.poisson(200, duration=60)`` and the other schedules are arrival offsets in
seconds; ``loadprobe.load.run(url, offsets)`` sends them (docs/load.md).
"""

from .._lazy import forward

__getattr__ = forward(__name__, "generator")
