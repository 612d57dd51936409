"""What a plan must meet, resolved once: the sizing rate and its 1.5x stress, the latency targets, the power budget.

The planner makes one ``Targets`` from the portrait and the constraints (``resolve``) and every step reads
it -- sizing, judging, the files -- so a target has one value and one reason wherever it is used.

Usage::

    targets = resolve(portrait, constraints)     # LoadprobeError when there is no rate to size for
    targets.rate_rps, targets.stress_rps         # the recorded peak (or --min-rps), and 1.5x it
    targets.p95_ms, targets.p95_why              # --slo-p95-ms, or the recorded p95 plus 10%
    targets.slo_section()                        # pipeline.yaml's slo:
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import LoadprobeError

__all__ = ["RECORDED_SLO_SLACK", "STRESS", "Targets", "resolve"]

STRESS = 1.5
"""The rate multiple every plan must also carry: a burst above the sizing rate, not its collapse."""

RECORDED_SLO_SLACK = 0.10
"""Without --slo-p95-ms the target is the recorded p95 plus this share: a replay of the recording agrees with
it to about this much (loadprobe verify's tolerance), so the plan that keeps everything as recorded meets it."""


@dataclass(frozen=True, kw_only=True)
class Targets:
    """The targets of one planning run (``resolve``): what every option is sized for and judged against."""

    rate_rps: float  # the sizing rate
    rate_why: str
    rate_given: bool  # --min-rps; else the recorded peak (whose own sampling error the resampled draws carry)
    p95_ms: float | None  # None: no latency target (nothing recorded, none given)
    p95_why: str
    p99_ms: float | None = None  # --slo-p99-ms only
    power_budget_w: float | None = None  # --power-budget-w: provisioned power, all units

    @property
    def stress_rps(self) -> float:
        return STRESS * self.rate_rps

    def slo_section(self) -> dict:
        """pipeline.yaml's ``slo:`` -- p95 (given or derived), p99 where given, the sizing rate."""
        slo = {}
        if self.p95_ms:
            slo["p95_ms"] = _num(self.p95_ms)
        if self.p99_ms:
            slo["p99_ms"] = _num(self.p99_ms)
        slo["min_rps"] = _num(self.rate_rps)
        return slo


def resolve(portrait, constraints, rate_why: str | None = None) -> Targets:
    """The targets for ``portrait`` under ``constraints``: the rate asked for (--min-rps) or the recorded peak, the
    p95 asked for or the recorded p95 plus ``RECORDED_SLO_SLACK``, the p99 and power budget as given.
    ``rate_why``: the caller's own reason for the rate (a scenario, a benchmark), said with the plan."""
    traffic, asked = portrait.traffic, constraints.asked
    rate = asked.min_rps or (traffic.peak_rps if traffic else None)
    if not rate:
        raise LoadprobeError("the portrait has no request rate; give --min-rps")
    if rate_why is None:
        rate_why = ("the rate asked for (--min-rps)" if asked.min_rps else
                    f"the recorded peak (per {traffic.bucket_s:g} s); give --min-rps to plan for another rate")
    req = portrait.requests
    recorded_p95 = req.latency_ms.p95 if req is not None and req.latency_ms else None
    if asked.slo_p95_ms:
        p95, p95_why = asked.slo_p95_ms, "the target asked for (--slo-p95-ms)"
    elif recorded_p95:
        p95 = recorded_p95 * (1 + RECORDED_SLO_SLACK)
        p95_why = (f"the recorded p95 ({recorded_p95:.3g} ms) plus {RECORDED_SLO_SLACK:.0%}: what a replay of the "
                   "recording meets; give --slo-p95-ms for another")
    else:
        p95, p95_why = None, "none: no request latency recorded and no --slo-p95-ms"
    return Targets(rate_rps=rate, rate_why=rate_why, rate_given=bool(asked.min_rps), p95_ms=p95, p95_why=p95_why,
                   p99_ms=asked.slo_p99_ms, power_budget_w=asked.power_budget_w)


def _num(value: float) -> float:
    return round(float(value), 3)  # as plan/files.py writes every figure
