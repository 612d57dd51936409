"""A plan checked once it runs: its predictions against the recording of it, and the correction.

Usage::

    from loadprobe.verify import calibrate, verify

    report = verify("plan/pipeline.yaml", ["data/"])   # simulate the plan at the observed arrivals, compare
    report.passed, report.worst, print(report.render())
    corrected = calibrate(report)                      # PipelineConfig with a calibration: section

``observed`` reads what the plan did from the recording; ``check`` compares and calibrates.
The command is ``loadprobe verify`` (docs/verify.md).
"""

from .check import DEFAULT_TOLERANCE, Verification, calibrate, verify
from .observed import Observed, observe

__all__ = ["DEFAULT_TOLERANCE", "Observed", "Verification", "calibrate", "observe", "verify"]
