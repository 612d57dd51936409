"""The INT8 check: capture chosen layer outputs of two precisions (``capture``) and compare them
layer by layer (``compare``, with ``figures`` and ``verdict``; align.json is ``document``'s):
``loadprobe.align.align("fp32.npz", "int8.npz")``."""

from .._imports import forward

# Each public name and the module that owns it.
_OWNERS = {
    **dict.fromkeys(("align", "load_labels"), "compare"),
    **dict.fromkeys(("DECISIONS", "ESTIMATE_LABEL", "Thresholds"), "verdict"),
    **dict.fromkeys(("FORMAT", "VERSION", "AlignEvidence", "check_stages", "evidence", "load_evidence", "read_align",
                     "write_align"), "document"),
    "SQNR_CAP_DB": "figures",
}


__getattr__ = forward(__name__, _OWNERS)
