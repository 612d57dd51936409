"""Load generation: arrival schedules and the open-loop HTTP client that keeps to them.

``loadprobe.load.poisson(200, duration=60)`` and the other schedules are arrival offsets in
seconds; ``loadprobe.load.run(url, offsets)`` sends them (docs/load.md).
"""

import importlib


def __getattr__(name: str):
    # import_module, not 'from . import': that would ask this __getattr__ for the module again.
    module = importlib.import_module(f"{__name__}.generator")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'loadprobe.load' has no attribute {name!r}") from None
