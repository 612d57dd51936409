"""The INT8 check: capture chosen layer outputs of two precisions (``capture``) and compare them
layer by layer (``compare``): ``loadprobe.align.align("fp32.npz", "int8.npz")``."""

from .._lazy import forward

__getattr__ = forward(__name__, "compare")
