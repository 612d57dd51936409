"""A plan checked once it runs: its predictions against the recording of it, and the correction.

Usage::

    from loadprobe.verify import calibrate, verify

    report = verify("plan/pipeline.yaml", ["data/"])   # simulate the plan at the observed arrivals, compare
    report.passed, report.worst, print(report.render())
    corrected = calibrate(report)                      # PipelineConfig with a calibration: section

``observed`` reads what the plan did from the recording; ``check`` compares and calibrates a pipeline of
stages; ``llm`` an LLM plan's pools (TTFT, TPOT, E2E; the step times' scale).
The command is ``loadprobe verify`` (docs/verify.md).
"""

from . import check
from .check import DEFAULT_TOLERANCE, Verification
from .llm import LlmVerification, calibrate_llm, verify_llm
from .observed import Observed, observe

__all__ = ["DEFAULT_TOLERANCE", "LlmVerification", "Observed", "Verification", "calibrate", "observe", "verify"]


def verify(path, data: list, *, tolerance: float | None = None, seed: int = 0, config=None):
    """``path``'s plan checked against its recording ``data``: a pipeline's stages (``check.verify``), or an LLM
    plan's pools (``llm.verify_llm``: TTFT, TPOT, E2E)."""
    from ..pipeline import files as pipeline

    config = config or pipeline.load(path)
    if config.llm is not None:
        return verify_llm(path, list(data), config=config, tolerance=tolerance, seed=seed)
    return check.verify(path, data, tolerance=tolerance, seed=seed, config=config)


def calibrate(report):
    """The report's plan with the ``calibration:`` its recording measured (``check.calibrate``, ``llm.calibrate_llm``)."""
    if isinstance(report, LlmVerification):
        return calibrate_llm(report)
    return check.calibrate(report)
