"""An LLM plan's predictions against the recording of its engines: TTFT, TPOT and E2E, and the step-time correction.

The recording (the engine's spans, its OpenTelemetry spans, or the load client's) gives each
request's arrival, prompt and output lengths, and first and last output; the plan's pools replay
those arrivals with those lengths (``simulator.llm.pools.replay_plan``) and the percentiles are
compared. ``calibrate_llm`` measures the correction: per pool, the scale that makes the replay's
time match the recording's -- the decode time from first to last token for a pool that decodes, the
time to the first token for a prefill pool -- and, for a colocated plan, the median of what the
recorded TTFT holds beyond the replay's (work before the first token no iteration holds), written
as the calibration's ``handoff_ms``. Both go into pipeline.yaml's ``calibration:``, which the
replay applies.

Usage::

    report = verify_llm("plan/pipeline.yaml", ["data/"])
    report.passed, print(report.render()); corrected = calibrate_llm(report)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone

import numpy as np

from .._errors import LoadprobeError
from .._table import text_table
from ..formats import VERIFY
from .check import Judged, tolerance_of

DRAWS = 5  # replays with their own random draws: each figure is their median, so one draw's luck does not decide
BISECTIONS = 10  # a scale changes the batches, which change the time: the scale is found by bisection (to ~1%)
BRACKET = 1e3  # the most a scale is sought away from the file's, either way


@dataclass
class LlmVerification(Judged):
    path: str
    config: object
    source: str
    requests: int
    rows: list  # {"what", "predicted", "observed", "error", "checked", "unit"}
    tolerance: float
    seed: int
    measured: dict  # the recording and the replay side by side, for calibrate_llm

    def to_dict(self) -> dict:
        return {"version": VERIFY.value, "kind": "llm", "pipeline": self.path, "data": self.source,
                "requests": self.requests, "seed": self.seed, "tolerance": self.tolerance, "passed": self.passed,
                "worst_error": self.worst, "calibrated": self.config.calibration is not None, "rows": self.rows}

    def render(self) -> str:
        head = (f"{self.path} against {self.source}: {self.requests:,} LLM requests, the plan's pools replayed at "
                "their arrivals with their prompt and output lengths"
                + (" and the file's calibration" if self.config.calibration is not None else "") + f", seed {self.seed}")
        rows = [[r["what"], f"{r['predicted']:.4g}" if r["predicted"] is not None else "-",
                 f"{r['observed']:.4g}" if r["observed"] is not None else "-",
                 "-" if r["error"] is None else f"{r['error']:+.1%}",
                 "yes" if self.within(r) else "NO"] for r in self.rows]
        lines = [head, ""] + text_table(["ms", "predicted", "observed", "error", "within"], rows)
        if self.passed:
            verdict = f"passed: TTFT, TPOT and E2E p50 and p95 within {self.tolerance:.0%}"
        elif self.config.calibration is None or not self.config.calibration.source.startswith(
                f"loadprobe verify on {self.source}:"):  # none, or measured on another recording
            verdict = (f"FAILED: error {self.worst:.1%} > the tolerance of {self.tolerance:.0%}; loadprobe verify "
                       "--calibrate corrects the pools' step times and the work before the first token"
                       + ("" if self.config.calibration is None else
                          f" on this recording (the file's calibration is from {self.config.calibration.source})"))
        else:
            verdict = (f"FAILED: error {self.worst:.1%} > the tolerance of {self.tolerance:.0%} with the file's "
                       f"calibration ({self.config.calibration.source}): what remains is not the step times' scale "
                       "but what the replay does not model of this run (the rows above say where)")
        return "\n".join(lines + ["", verdict])


def verify_llm(path, data: list, *, config, tolerance: float | None = None, seed: int = 0) -> LlmVerification:
    """``config`` (read from ``path``) replayed at the arrivals of the LLM recording ``data`` and compared."""
    from ..analysis.run import llm_recording
    from ..simulator.llm.engine import Workload
    from ..simulator.llm.pools import replay_plan

    _, views = llm_recording(list(data))
    served = next((views[k] for k in ("service", "client") if views.get(k) is not None
                   and (views[k].with_first & (views[k].tokens_out >= 1)).sum() >= 2), None)
    if served is None:
        raise LoadprobeError(f"{', '.join(map(str, data))}: no two LLM requests with their first and last output "
                             "recorded; record the engine's spans or its load client (loadprobe load --openai "
                             "--record) while the plan runs")
    keep = served.with_first & (served.tokens_out >= 1)
    order = np.argsort(served.start[keep], kind="stable")
    start = served.start[keep][order]
    observed = {"arrival": start - start[0], "tokens_in": np.maximum(served.tokens_in[keep][order], 1),
                "tokens_out": served.tokens_out[keep][order], "first": served.first[keep][order] - start,
                "last": np.maximum(served.last[keep][order], served.first[keep][order]) - start}
    workload = Workload(observed["arrival"], observed["tokens_in"], observed["tokens_out"])
    draws = [replay_plan(config, workload, seed + k) for k in range(DRAWS)]
    predicted = [{"first": r.first_ns - workload.arrival_ns, "last": r.last_ns - workload.arrival_ns} for r in draws]
    rows = []
    for name, what in (("TTFT", "first"), ("TPOT", "tpot"), ("E2E", "last")):
        for q in (50, 95):
            obs = _figure(observed, observed, what, q)
            each = [v for v in (_figure(side, observed, what, q) for side in predicted) if v is not None]
            pred = float(np.median(each)) if each else None
            rows.append({"what": f"{name} p{q}", "unit": "ms", "predicted": pred, "observed": obs,
                         "error": None if pred is None or not obs else round(pred / obs - 1.0, 4), "checked": True})
    measured = {"observed": observed, "workload": workload}
    source = ", ".join(map(str, data))
    return LlmVerification(str(path), config, source, int(keep.sum()), rows, tolerance_of(config, tolerance), seed,
                           measured)


def _figure(side: dict, observed: dict, what: str, q: int) -> float | None:
    """The ``q``th percentile of TTFT (``first``), TPOT (``tpot``) or E2E (``last``) of one side, ms."""
    first, last = side["first"], side["last"]
    if what == "tpot":
        decoding = (observed["tokens_out"] >= 2) & (first >= 0) & (last >= 0)
        values = (last - first)[decoding] / (observed["tokens_out"][decoding] - 1)
    else:
        values = side[what][side[what] >= 0]
    return float(np.percentile(values, q)) / 1e6 if len(values) else None


def calibrate_llm(report: LlmVerification):
    """The plan with a ``calibration:`` section measured from the recording (module docstring)."""
    from ..pipeline.config import CalibrationConfig, StageCalibration
    from ..simulator.llm.pools import STAGE, replay_plan

    config, seen, workload = report.config, report.measured["observed"], report.measured["workload"]
    pools = config.llm.pools
    scales = {STAGE[p.role]: 1.0 for p in pools.values()}
    colocated = any(p.role == "colocated" for p in pools.values())
    decoder = "generate" if colocated else "decode"
    decoding = seen["tokens_out"] >= 2
    rec_decode = (seen["last"] - seen["first"])[decoding]

    def replayed_with(scales: dict) -> list:
        trial = replace(config, calibration=CalibrationConfig(
            source="trial", stages={s: StageCalibration(service_time_scale=v) for s, v in scales.items()}))
        return [replay_plan(trial, workload, report.seed + k) for k in range(DRAWS)]

    def decode_ratio(scale: float) -> float:
        total = 0.0
        for replayed in replayed_with(dict(scales, **{decoder: scale})):
            ok = decoding & (replayed.first_ns >= 0) & (replayed.last_ns >= 0)
            total += float((replayed.last_ns - replayed.first_ns)[ok].sum())
        return total / DRAWS / max(float(rec_decode.sum()), 1.0)

    def ttft_ratio(scale: float) -> float:
        medians = [np.median((r.first_ns - workload.arrival_ns)[r.first_ns >= 0])
                   for r in replayed_with(dict(scales, prefill=scale))]
        return float(np.median(medians) / max(np.median(seen["first"]), 1))

    if rec_decode.sum() > 0:
        scales[decoder] = _solve(decode_ratio)
    observed_ms = {decoder: (rec_decode / np.maximum(seen["tokens_out"][decoding] - 1, 1), int(decoding.sum()))}
    offset = 0.0
    if colocated:  # one pool: the TTFT's median excess over the replays is work outside its iterations
        excess = [np.median(seen["first"][r.first_ns >= 0] - (r.first_ns - workload.arrival_ns)[r.first_ns >= 0])
                  for r in replayed_with(scales)]
        offset = max(0.0, float(np.median(excess)) / 1e6)
    else:  # a prefill pool's whole job is the first token: its median sets the scale
        scales["prefill"] = _solve(ttft_ratio)
        observed_ms["prefill"] = (seen["first"], len(seen["first"]))
    stages = {}
    for stage, scale in scales.items():
        values, count = observed_ms.get(stage, (np.zeros(0), 0))
        stages[stage] = StageCalibration(
            service_time_scale=round(min(max(scale, 1e-4), 1e4), 4),
            observed_p50_ms=round(float(np.percentile(values, 50)) / 1e6, 4) if len(values) else None,
            observed_p95_ms=round(float(np.percentile(values, 95)) / 1e6, 4) if len(values) else None,
            executions=count)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    given = config.calibration.tolerance if config.calibration is not None else None
    return replace(config, calibration=CalibrationConfig(
        source=f"loadprobe verify on {report.source}: {report.requests:,} LLM requests, {when}",
        handoff_ms=round(offset, 4), tolerance=given, stages=stages))


def _solve(ratio) -> float:
    """The scale at which ``ratio(scale)`` (the replay's time over the recording's, growing with the scale) is 1:
    bracketed by halving or doubling from 1, then bisected in log space."""
    lo = hi = 1.0
    if ratio(1.0) > 1.0:
        while ratio(lo) > 1.0 and lo > 1 / BRACKET:
            hi, lo = lo, lo / 2
    else:
        while ratio(hi) <= 1.0 and hi < BRACKET:
            lo, hi = hi, hi * 2
    for _ in range(BISECTIONS):
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if ratio(mid) > 1.0 else (mid, hi)
    return (lo * hi) ** 0.5
