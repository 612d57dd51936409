"""The INT8 check: capture chosen layer outputs of two precisions (``capture``) and compare them
layer by layer (``compare``): ``loadprobe.align.align("fp32.npz", "int8.npz")``."""

import importlib


def __getattr__(name: str):
    # import_module, not 'from . import': that would ask this __getattr__ for the module again.
    module = importlib.import_module(f"{__name__}.compare")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'loadprobe.align' has no attribute {name!r}") from None
