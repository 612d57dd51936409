"""pipeline.yaml: the plan as a file, what ``loadprobe recommend`` writes and ``loadprobe.route``
and ``loadprobe.simulator`` read: ``config = loadprobe.pipeline.load("pipeline.yaml")``."""

import importlib


def __getattr__(name: str):
    # import_module, not 'from . import': that would ask this __getattr__ for the module again.
    module = importlib.import_module(f"{__name__}.config")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'loadprobe.pipeline' has no attribute {name!r}") from None
