"""What a plan must meet, resolved once: the sizing rate and its 1.5x stress, the latency targets, the power budget.

The planner makes one ``Targets`` from the portrait and the constraints (``resolve``) and every step reads
it -- sizing, judging, the files -- so a target has one value and one reason wherever it is used.

Usage::

    targets = resolve(portrait, constraints)     # LoadprobeError when there is no rate to size for
    targets.rate_rps, targets.stress_rps         # the recorded peak (or --min-rps), and 1.5x it
    targets.p95_ms, targets.p95_why              # --slo-p95-ms, or the recorded p95 plus 10%
    targets.ttft_p95_ms, targets.ttft_why        # an LLM load's: --slo-ttft-ms, or its recorded p95 plus 10%
    targets.latency_misses(p50=12, p95=40, p99=90)   # [("p95", 40, 33.0)]: the end-to-end targets missed
    targets.slo_section(), targets.to_dict()     # pipeline.yaml's slo:, plans.json's targets
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
    p50_ms: float | None = None  # --slo-p50-ms only
    p99_ms: float | None = None  # --slo-p99-ms only
    power_budget_w: float | None = None  # --power-budget-w: provisioned power, all units
    # An LLM load's (the portrait has an ``llm`` section): 95% of requests' first token within ``ttft_p95_ms``,
    # and their time per later output token within ``tpot_p95_ms``. The stage pipeline's options are judged on
    # end-to-end latency; these go into pipeline.yaml's slo for what judges an engine per token.
    ttft_p95_ms: float | None = None
    ttft_why: str = ""
    tpot_p95_ms: float | None = None
    tpot_why: str = ""

    @property
    def stress_rps(self) -> float:
        return STRESS * self.rate_rps

    def latency_misses(self, *, p50: float | None, p95: float | None, p99: float | None) -> list[tuple]:
        """The end-to-end targets that these percentiles (ms) miss: ``(name, value, target)`` each, in
        percentile order. A percentile that is None (not estimated) misses nothing here: saturation is judged
        apart."""
        figures = (("p50", p50, self.p50_ms), ("p95", p95, self.p95_ms), ("p99", p99, self.p99_ms))
        return [(name, value, target) for name, value, target in figures
                if target is not None and value is not None and value > target]

    def slo_section(self) -> dict:
        """pipeline.yaml's ``slo:`` -- every latency target set (given or derived) and the sizing rate."""
        slo = {key: _num(value) for key in _SLO_KEYS if (value := getattr(self, key))}
        slo["min_rps"] = _num(self.rate_rps)
        return slo

    def to_dict(self) -> dict:
        """plans.json's ``targets``: each target set, with why it has its value."""
        out = {"rate_rps": _num(self.rate_rps), "rate_why": self.rate_why, "stress_rps": _num(self.stress_rps),
               **{key: _num(value) for key in _SLO_KEYS if (value := getattr(self, key))},
               "power_budget_w": self.power_budget_w}
        for key, why in (("p95_ms", self.p95_why), ("ttft_p95_ms", self.ttft_why), ("tpot_p95_ms", self.tpot_why)):
            if out.get(key) is not None or key == "p95_ms":
                out[key.replace("_p95_ms", "").replace("_ms", "") + "_why"] = why
        return out

    def describe(self) -> str:
        """One line for the terminal: each latency target set and where it comes from."""
        parts = [f"p95 {self.p95_ms:.3g} ms ({self.p95_why})" if self.p95_ms else f"p95: {self.p95_why}"]
        parts += [f"{name} {value:g} ms (given)" for name, value in (("p50", self.p50_ms), ("p99", self.p99_ms))
                  if value]
        parts += [f"{name} p95 {value:.3g} ms ({why})" for name, value, why in
                  (("TTFT", self.ttft_p95_ms, self.ttft_why), ("TPOT", self.tpot_p95_ms, self.tpot_why)) if value]
        return "targets: " + "; ".join(parts)


_SLO_KEYS = ("p50_ms", "p95_ms", "p99_ms", "ttft_p95_ms", "tpot_p95_ms")


def resolve(portrait, constraints, rate_why: str | None = None) -> Targets:
    """The targets for ``portrait`` under ``constraints``: the rate asked for (--min-rps) or the recorded peak, the
    p95 asked for or the recorded p95 plus ``RECORDED_SLO_SLACK``, the p50, p99 and power budget as given; for
    an LLM load (``portrait.llm``), its TTFT and TPOT p95 as asked or as recorded plus the same slack.
    ``rate_why``: the caller's own reason for the rate (a scenario, a benchmark), said with the plan."""
    traffic, asked = portrait.traffic, constraints.asked
    rate = asked.min_rps or (traffic.peak_rps if traffic else None)
    if not rate:
        raise LoadprobeError("the portrait has no request rate; give --min-rps")
    if rate_why is None:
        rate_why = ("the rate asked for (--min-rps)" if asked.min_rps else
                    f"the recorded peak (per {traffic.bucket_s:g} s); give --min-rps to plan for another rate")
    req = portrait.requests
    p95, p95_why = _target("p95", asked.slo_p95_ms, "--slo-p95-ms",
                           req.latency_ms if req is not None else None, "request latency")
    llm = getattr(portrait, "llm", None)
    if llm is None and (asked.slo_ttft_ms or asked.slo_tpot_ms):
        flag = "--slo-ttft-ms" if asked.slo_ttft_ms else "--slo-tpot-ms"
        raise LoadprobeError(f"{flag}: the portrait holds no LLM requests (no spans with output tokens), so there "
                             "is no first token or time per token to hold to; record the engine's tokens "
                             "(docs/recording.md#llm-requests-tokens-and-the-outputs-timing) or leave the option out")
    ttft = tpot = (None, "")
    if llm is not None:
        ttft = _target("TTFT p95", asked.slo_ttft_ms, "--slo-ttft-ms", llm.ttft_ms, "time to first token")
        tpot = _target("TPOT p95", asked.slo_tpot_ms, "--slo-tpot-ms", llm.tpot_ms, "time per output token")
    return Targets(rate_rps=rate, rate_why=rate_why, rate_given=bool(asked.min_rps), p95_ms=p95, p95_why=p95_why,
                   p50_ms=asked.slo_p50_ms, p99_ms=asked.slo_p99_ms, power_budget_w=asked.power_budget_w,
                   ttft_p95_ms=ttft[0], ttft_why=ttft[1], tpot_p95_ms=tpot[0], tpot_why=tpot[1])


def _target(name: str, given: float | None, flag: str, recorded, what: str) -> tuple[float | None, str]:
    """A p95 target and why: ``given`` (``flag``), else the ``recorded`` percentiles' p95 plus the slack."""
    if given:
        return given, f"the target asked for ({flag})"
    if recorded is not None and recorded.p95:
        return (recorded.p95 * (1 + RECORDED_SLO_SLACK),
                f"the recorded {name} ({recorded.p95:.3g} ms) plus {RECORDED_SLO_SLACK:.0%}: what a replay of the "
                f"recording meets; give {flag} for another")
    return None, f"none: no {what} recorded and no {flag}"


def _num(value: float) -> float:
    return round(float(value), 3)  # as plan/files.py writes every figure
