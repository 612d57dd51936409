"""The INT8 check: capture chosen layer outputs of two precisions (``capture``) and compare them
layer by layer (``compare``, with ``figures`` and ``verdict``; align.json is ``document``'s):
``loadprobe.align.align("fp32.npz", "int8.npz")``."""

import importlib

# Each public name and the module that owns it.
_OWNERS = {
    **dict.fromkeys(("align", "load_labels"), "compare"),
    **dict.fromkeys(("DECISIONS", "ESTIMATE_LABEL", "Thresholds"), "verdict"),
    **dict.fromkeys(("FORMAT", "VERSION", "AlignEvidence", "check_stages", "evidence", "load_evidence", "read_align",
                     "write_align"), "document"),
    "SQNR_CAP_DB": "figures",
}


def __getattr__(name: str):
    owner = _OWNERS.get(name)
    if owner is None:
        raise AttributeError(f"module 'loadprobe.align' has no attribute {name!r}")
    # import_module, not 'from . import': that would ask this __getattr__ for the module again.
    return getattr(importlib.import_module(f"{__name__}.{owner}"), name)
