"""A plan's predictions against what it did: simulate it at the observed arrivals, compare, and correct it.

Usage::

    from loadprobe.verify.check import calibrate, verify

    report = verify("plan/pipeline.yaml", ["data/"])      # Verification: rows of predicted vs observed
    print(report.render()); report.passed; json.dumps(report.to_dict())    # verify.json
    config = calibrate(report)                            # the plan with a ``calibration:`` section

The prediction is what ``loadprobe simulate`` says of the plan: each stage's ``service_time_ms``
(times its calibration scale, where the file has one), plus the calibration's hand-off delay,
replayed on the arrival times the recording saw. End to end, per stage (from reaching it to
leaving it), the mean wait per stage, each fallback's share and the share of requests that
failed are compared; the plan passes when the end-to-end p50 and p95 are within its tolerance
(``calibration.tolerance``, else ``DEFAULT_TOLERANCE``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

import numpy as np

from .._table import text_table
from ..formats import VERIFY
from .observed import Observed, observe

__all__ = ["DEFAULT_TOLERANCE", "MIN_EXECUTIONS", "Judged", "Verification", "calibrate", "tolerance_of", "verify"]

DEFAULT_TOLERANCE = 0.10
MIN_EXECUTIONS = 20  # a stage's scale is measured at the plan's batch size when it ran this often there


class Judged:
    """A comparison's verdict over its ``rows`` (each ``{"error", "checked", ...}``) at its ``tolerance``."""

    rows: list
    tolerance: float

    def within(self, row: dict) -> bool:
        return row["error"] is not None and abs(row["error"]) <= self.tolerance

    @property
    def passed(self) -> bool:
        return all(self.within(r) for r in self.rows if r["checked"])

    @property
    def worst(self) -> float | None:
        errors = [abs(r["error"]) for r in self.rows if r["checked"] and r["error"] is not None]
        return max(errors) if errors else None


def tolerance_of(config, given: float | None) -> float:
    """The tolerance a check uses: ``given``, else the file's ``calibration.tolerance``, else the default."""
    if given is not None:
        return given
    found = config.calibration.tolerance if config.calibration is not None else None
    return found if found is not None else DEFAULT_TOLERANCE


@dataclass
class Verification(Judged):
    path: str
    config: object
    observed: Observed
    predicted: object  # SimulationResult
    rows: list  # {"what", "predicted", "observed", "error", "checked"}
    tolerance: float
    seed: int

    def to_dict(self) -> dict:
        return {"version": VERIFY.value, "pipeline": self.path, "data": self.observed.source,
                "requests": self.observed.requests, "root": self.observed.root, "seed": self.seed,
                "tolerance": self.tolerance, "passed": self.passed, "worst_error": self.worst,
                "calibrated": self.config.calibration is not None,
                "handoff_ms_observed": self.observed.handoff_ms,
                "outcomes_observed": self.observed.outcomes, "outcomes_predicted": self.predicted.outcomes,
                "rows": self.rows}

    def render(self) -> str:
        head = (f"{self.path} against {self.observed.source}: {self.observed.requests:,} requests "
                f"({self.observed.root!r}), simulated at their arrival times"
                + (" with the file's calibration" if self.config.calibration is not None else "") + f", seed {self.seed}")
        rows = [[r["what"], _fmt(r["predicted"], r["unit"]), _fmt(r["observed"], r["unit"]),
                 "-" if r["error"] is None else (f"{r['error']:+.1%}" if r["unit"] != "share" else
                                                 f"{100 * r['error']:+.1f} pt"),
                 ("yes" if self.within(r) else "NO") if r["checked"] else ""]
                for r in self.rows]
        lines = [head, ""] + text_table(["", "predicted", "observed", "error", "within"], rows)
        if self.passed:
            verdict = f"passed: end-to-end p50 and p95 within {self.tolerance:.0%}"
        elif self.config.calibration is None:
            verdict = (f"FAILED: end-to-end error {self.worst:.1%} > the tolerance of {self.tolerance:.0%}; "
                       "loadprobe verify --calibrate corrects the plan's service times and hand-off delay")
        else:  # calibrating again on the same recording changes nothing: say what is left
            verdict = (f"FAILED: end-to-end error {self.worst:.1%} > the tolerance of {self.tolerance:.0%} with the "
                       f"file's calibration ({self.config.calibration.source}); what remains is not the service "
                       "times or the hand-off delay but what the simulation does not model of this run (the rows "
                       "above say where); --calibrate again only if that calibration came from another recording")
        return "\n".join(lines + ["", verdict])


def verify(path, data: list, *, tolerance: float | None = None, seed: int = 0, config=None) -> Verification:
    """``path``'s plan (or ``config``, read from it) checked against the recording ``data``."""
    from ..pipeline import files as pipeline
    from ..simulator.result import simulate

    config = config or pipeline.load(path)
    tolerance = tolerance_of(config, tolerance)
    seen = observe(config, list(data), plan=str(path))
    result = simulate(config, seen.arrivals_s, seed=seed)
    return Verification(str(path), config, seen, result, _rows(config, seen, result), tolerance, seed)


def _rows(config, seen: Observed, result) -> list:
    from ..estimate.queueing import lognormal_mean
    from ..simulator.servicetimes import config_distribution

    rows = []

    def add(what, predicted, observed, unit="ms", checked=False, share=False):
        if predicted is None or observed is None:
            error = None
        elif share:
            error = predicted - observed
        else:
            error = (predicted - observed) / observed if observed else None
        rows.append({"what": what, "predicted": predicted, "observed": observed, "error": error,
                     "unit": "share" if share else unit, "checked": checked})

    for q in (50, 95, 99):
        add(f"end to end p{q}", result.latency_ms[f"p{q}"], _pct(seen.latency_ms, q), checked=q in (50, 95))
    failed = 1 - result.outcomes.get("ok", 0) / result.requests if result.requests else None
    add("failed share", failed, 1 - seen.outcomes.get("ok", 0) / seen.requests if seen.requests else None, share=True)
    for stage in config.stages:
        sim, obs = result.stages.get(stage.name, {}), seen.stages[stage.name]
        for q in (50, 95, 99):
            add(f"{stage.name} p{q}", sim.get(f"p{q}"), _pct(obs.latency_ms, q))
        st = stage.service_time_ms
        scale = config.calibration.scale(stage.name) if config.calibration is not None else 1.0
        if st is not None and st.p50 is not None and sim.get("mean") is not None:
            recorded = config_distribution(st, scale)
            service = (recorded.mean_ms if recorded is not None else
                       lognormal_mean(st.p50 * scale, (st.p95 or st.p50) * scale))
            add(f"{stage.name} wait (mean)", max(0.0, sim["mean"] - service),
                float(np.mean(obs.queue_ms)) if len(obs.queue_ms) else None)
        if stage.fallback is not None:
            spans = sum(obs.engines.values())
            add(f"{stage.name} failover share", sim.get("failover_share"),
                _fallback_spans(config, stage, obs) / spans if spans else None, share=True)
    return rows


def calibrate(report: Verification):
    """The report's plan with a ``calibration:`` section measured from its recording: per stage, the observed
    median execution on its own engine's kind over the file's ``service_time_ms.p50`` (at the plan's batch size
    where it ran often enough there); the runtime's hand-off delay per stage; where it was measured."""
    from ..pipeline.config import CalibrationConfig, StageCalibration

    config, seen = report.config, report.observed
    stages = {}
    for stage in config.stages:
        st, obs = stage.service_time_ms, seen.stages[stage.name]
        # service_time_ms is the time on the stage's own engine: its fallback's executions, on another kind, say
        # nothing of it
        own = obs.kinds == config.engines[stage.engine].kind
        if st is None or not st.p50 or not own.any():
            continue
        times, batches = obs.service_ms[own], obs.batches[own]
        size = stage.batch.size if stage.batch is not None else None
        if size and (batches == size).sum() >= MIN_EXECUTIONS:
            times = times[batches == size]
        p50, p95 = float(np.percentile(times, 50)), float(np.percentile(times, 95))
        stages[stage.name] = StageCalibration(service_time_scale=round(max(p50 / st.p50, 1e-4), 4),
                                              observed_p50_ms=round(p50, 4), observed_p95_ms=round(p95, 4),
                                              executions=int(len(times)))
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    given = config.calibration.tolerance if config.calibration is not None else None
    handoff = seen.handoff_ms or 0.0
    if config.host is not None:  # the plan runs the time outside its stages as the host's work: only the rest is
        work = config.host.work_ms
        handoff = max(0.0, handoff - (work.p50 or work.mean or 0.0) / max(1, len(config.stages)))  # hand-off
    calibration = CalibrationConfig(
        source=f"loadprobe verify on {seen.source}: {seen.requests:,} requests ({seen.root!r}), {when}",
        handoff_ms=round(handoff, 4), tolerance=given, stages=stages)
    return replace(config, calibration=calibration)


def _fallback_spans(config, stage, obs) -> int:
    """The stage's spans on its fallback: by the engine's name, or by its kind where that differs from the stage's
    own engine's (a service's probes name their engine ``cuda:0``, not the plan's ``gpu0``)."""
    own, other = config.engines[stage.engine].kind, config.engines[stage.fallback.engine].kind
    by_name = obs.engines.get(stage.fallback.engine, 0)
    if by_name or own == other:
        return by_name
    from ..schema import engine_kind

    return sum(n for engine, n in obs.engines.items() if engine not in config.engines and engine_kind(engine) == other)


def _pct(values: np.ndarray, q: int) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.1%}" if unit == "share" else f"{value:.3g} ms"
