"""What a plan did once it ran, read from the recording: arrivals, latencies, outcomes, each stage's times.

Usage::

    seen = observe(config, ["data/"])      # the stages of ``config``, as loadprobe recorded them
    seen.arrivals_s, seen.latency_ms, seen.outcomes, seen.stages["backbone"].service_ms
    seen.handoff_ms                        # the runtime's own delay per stage a request passes

A request is a root span (no parent) of the commonest root name -- the ``request`` span
``loadprobe.route.Router`` opens, or a service's own route span; its stages are the spans of
the plan's stages beneath it. A stage span's ``queue_ns`` is its wait for a slot (and a
batch); its duration the execution. What a request spent outside every stage's wait and
execution is the runtime's own: divided by the stage spans it passed, the hand-off overhead.

A plan's stage is compared only with spans that ran on an engine kind the plan places it on
(its engine's, or its fallback's): a span's ``engine`` names a plan engine (the Router records
those), else its kind is ``schema.engine_kind``'s. A recording that ran any stage elsewhere --
the service recorded on the CPU, checked against a plan that puts its backbone on a GPU -- is
refused, stage by stage, in one message: its end-to-end figures would mix engines.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .._errors import LoadprobeError

__all__ = ["Observed", "StageObserved", "observe"]

VERIFY_ONE = "a plan is verified against one service's recording: give the service's own folder (DATA/HOST/SERVICE)"


@dataclass
class StageObserved:
    """One stage's spans: times in milliseconds, of the spans that ended ok."""

    latency_ms: np.ndarray  # wait + execution: from reaching the stage to leaving it
    service_ms: np.ndarray  # execution
    queue_ms: np.ndarray  # wait for a slot or a batch
    engines: Counter = field(default_factory=Counter)  # engine -> spans (every status)
    batches: np.ndarray | None = None  # batch size of each ok span (1 where none was recorded)
    kinds: np.ndarray | None = None  # engine kind (cpu, gpu, npu) of each ok span


@dataclass
class Observed:
    source: str
    requests: int
    arrivals_s: np.ndarray  # request starts, seconds from the first
    latency_ms: np.ndarray  # end to end, the requests that ended ok
    outcomes: dict  # ok, timeout, error (a Router's fast reject is recorded as an error), cancelled
    stages: dict  # stage name -> StageObserved
    handoff_ms: float | None  # median over requests of (outside every stage) / (stage spans passed)
    root: str  # the root span's name


def observe(config, data: list, *, plan: str = "the plan") -> Observed:
    """The recording of ``config``'s plan running; LoadprobeError when it holds no request of it, or ran a
    stage on an engine kind the plan does not place it on (``plan`` names the file in that message)."""
    from ..analysis.services import recorded_service, span_tables, unreadable
    from ..simulator.recorded import column

    wanted = {s.name for s in config.stages}
    names = {"stage": "stage", "engine": "engine", "status": "status", "ts": "ts_ns", "dur": "dur_ns",
             "queue": "queue_ns", "span": "span_id", "parent": "parent_id", "batch": "batch"}
    columns: dict[str, list] = {k: [] for k in (*names, "run")}
    own, _ = recorded_service(data, how=VERIFY_ONE)  # the service's own spans: a load client's beside them hold none
    skipped: dict[str, str] = {}
    for number, table in enumerate(span_tables(own, skipped)):
        for key, name in names.items():
            columns[key].append(column(table, name))
        columns["run"].append(np.full(table.num_rows, number, np.int64))
    if not columns["ts"]:
        raise LoadprobeError(f"{', '.join(map(str, data))}: no spans to verify the plan against{unreadable(skipped)}")
    c = {k: np.concatenate(v) for k, v in columns.items()}
    renamed = {s.recorded: s.name for s in config.stages if s.recorded}
    if renamed:  # spans recorded under the recording's name count as the plan's stage
        names_seen, at = np.unique(c["stage"], return_inverse=True)
        c["stage"] = np.array([renamed.get(n, n) for n in names_seen.tolist()], dtype=object)[at]
    # span ids are unique within a run directory: key them with the file's run
    key = c["run"] * (1 << 40) + c["span"]
    parent_key = np.where(c["parent"] >= 0, c["run"] * (1 << 40) + c["parent"], -1)
    roots = c["parent"] < 0
    root_names = Counter(c["stage"][roots & ~np.isin(c["stage"], list(wanted))].tolist())
    if not root_names:
        raise LoadprobeError(f"{', '.join(map(str, data))}: no request spans above the plan's stages "
                             f"({', '.join(sorted(wanted))}); record the service with loadprobe (the Router opens one "
                             "per request)")
    root = root_names.most_common(1)[0][0]
    is_root = roots & (c["stage"] == root)
    in_plan = np.isin(c["stage"], list(wanted)) & np.isin(parent_key, key[is_root])
    if not in_plan.any():
        raise LoadprobeError(f"{', '.join(map(str, data))}: no spans of the plan's stages ({', '.join(sorted(wanted))}) "
                             f"under its {root!r} requests; is this the recording of this plan?")
    missing = sorted(wanted - set(c["stage"][in_plan].tolist()))
    if missing:
        raise LoadprobeError(f"{', '.join(map(str, data))}: no spans of the plan's stage{'s' * (len(missing) > 1)} "
                             f"{', '.join(map(repr, missing))} under its {root!r} requests; is this the recording of "
                             "this plan? (verify compares a plan with the recording of that plan running)")
    kinds = _kinds(config, c["engine"])
    _refuse_other_engines(config, c["stage"], kinds, in_plan, data, plan)
    starts = np.sort(c["ts"][is_root]) / 1e9
    arrivals = starts - starts[0]
    status = c["status"]
    outcomes = Counter(("ok" if s == "ok" else s or "error") for s in status[is_root].tolist())
    ok_root = is_root & (status == "ok") & (c["dur"] >= 0)
    latency = c["dur"][ok_root] / 1e6
    stages = {}
    for name in (s.name for s in config.stages):
        mine = in_plan & (c["stage"] == name)
        ok = mine & (status == "ok") & (c["dur"] >= 0)
        queue = np.maximum(c["queue"][ok], 0) / 1e6
        service = c["dur"][ok] / 1e6
        stages[name] = StageObserved(latency_ms=queue + service, service_ms=service, queue_ms=queue,
                                     engines=Counter(c["engine"][mine].tolist()),
                                     batches=c["batch"][ok], kinds=kinds[ok])
    return Observed(source=", ".join(map(str, data)), requests=int(is_root.sum()), arrivals_s=arrivals,
                    latency_ms=latency, outcomes=dict(outcomes), stages=stages,
                    handoff_ms=_handoff(c, key, parent_key, ok_root, in_plan), root=root)


def kinds_of(config, stage) -> dict:
    """The engine kinds ``config`` places ``stage`` on, each with the engines of that kind: own engine first."""
    kinds: dict[str, list] = {}
    for engine in stage.runs_on:
        kinds.setdefault(config.engines[engine].kind, []).append(engine)
    return kinds


def _kinds(config, engines: np.ndarray) -> np.ndarray:
    """Each span's engine kind: a plan engine's ``kind`` where the span names one, else ``engine_kind``."""
    from ..schema import engine_kind

    names, at = np.unique(engines.astype(str), return_inverse=True)
    planned = {name: e.kind for name, e in config.engines.items()}
    return np.array([planned.get(n) or engine_kind(n) for n in names.tolist()], dtype=object)[at.reshape(-1)]


def _refuse_other_engines(config, stages: np.ndarray, kinds: np.ndarray, in_plan: np.ndarray, data: list,
                          plan: str) -> None:
    """LoadprobeError naming every stage the recording ran on an engine kind the plan does not place it on."""
    wrong = []
    for stage in config.stages:
        wanted = kinds_of(config, stage)
        ran = Counter(kinds[in_plan & (stages == stage.name)].tolist())
        other = sum(n for kind, n in ran.items() if kind not in wanted)
        if other:
            recorded = ", ".join(f"{kind} ({n:,} spans)" for kind, n in sorted(ran.items()))
            where = " or ".join(f"{kind} ({', '.join(engines)})" for kind, engines in wanted.items())
            wrong.append(f"stage {stage.name!r} on {where} but the recording ran it on {recorded}")
    if wrong:
        raise LoadprobeError(
            f"{', '.join(map(str, data))}: not a recording of {plan} running on its engines: {plan} places "
            + "; ".join(wrong) + ". verify compares each stage only with spans on the engine kinds the plan gives it "
            "(end-to-end figures would mix engines otherwise): record the plan running on its engines (in "
            "loadprobe.route's Router, under loadprobe record; docs/verify.md), or verify a plan whose engines "
            "match the recording")


def _handoff(c: dict, key: np.ndarray, parent_key: np.ndarray, ok_root: np.ndarray, in_plan: np.ndarray):
    """Median over ok requests of the time outside every stage span's wait and execution, per stage span."""
    if not ok_root.any():
        return None
    index = {k: i for i, k in enumerate(key[ok_root].tolist())}
    inside = np.zeros(len(index))
    passed = np.zeros(len(index))
    for parent, dur, queue in zip(parent_key[in_plan].tolist(), c["dur"][in_plan].tolist(),
                                  c["queue"][in_plan].tolist()):
        at = index.get(parent)
        if at is not None and dur >= 0:
            inside[at] += dur + max(queue, 0)
            passed[at] += 1
    outside = c["dur"][ok_root] - inside
    per = outside[passed > 0] / passed[passed > 0] / 1e6
    return float(np.median(np.maximum(per, 0.0))) if len(per) else None
