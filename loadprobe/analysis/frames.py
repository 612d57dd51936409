"""Recorded data and portraits as pandas DataFrames, for notebooks.

Usage::

    import loadprobe

    spans = loadprobe.read_spans("data/", stage="backbone", since="2026-12-04T10:00")
    spans.groupby("engine")["dur_ms"].describe()
    samples = loadprobe.read_samples("data/", metric="util_pct")
    tables = loadprobe.portrait_frames(loadprobe.analyze(["data/"]))   # stages, traffic, devices, verdicts

pandas is an optional extra (``pip install 'loadprobe[pandas]'``), imported only when one of these
runs: never on the service path. Files are read with analysis's own reader, so a damaged or
unfinished file is left out exactly as ``loadprobe analyze`` leaves it out, and its reason is in
``frame.attrs["skipped"]``. Times: ``ts`` is a UTC timestamp, ``*_ms`` are milliseconds.
"""

from __future__ import annotations

import functools

from .._errors import LoadprobeError

__all__ = ["portrait_frames", "read_samples", "read_spans"]

SPAN_FILTERS = ("service", "host", "stage", "engine", "status", "since", "until")
SAMPLE_FILTERS = ("service", "host", "device", "metric", "since", "until")


def read_spans(paths, *, service: str | None = None, host: str | None = None, stage: str | None = None,
               engine: str | None = None, status: str | None = None, since=None, until=None):
    """Every span recorded under ``paths`` (directories, files, globs or URIs), one row each.

    Filters: ``service``/``host`` (fnmatch patterns on the runs), ``stage``, ``engine``, ``status``
    (exact values), ``since``/``until`` (ISO-8601, UTC without a zone, or epoch seconds) on the
    span's start. Columns: the recorded ones (docs/data-format.md) plus ``service``, ``host``,
    ``run``, ``ts`` (UTC timestamp), ``dur_ms`` and ``queue_ms``.
    """
    return _frame(paths, "spans", service=service, host=host, since=since, until=until,
                  equal={"stage": stage, "engine": engine, "status": status})


def read_samples(paths, *, service: str | None = None, host: str | None = None, device: str | None = None,
                 metric: str | None = None, since=None, until=None):
    """Every device sample recorded under ``paths``: ``ts``, ``device``, ``metric``, ``value``, ``service``,
    ``host``, ``run``. Filters as ``read_spans``'s, with ``device`` and ``metric`` exact values."""
    return _frame(paths, "samples", service=service, host=host, since=since, until=until,
                  equal={"device": device, "metric": metric})


def portrait_frames(portrait) -> dict:
    """A portrait's tables as DataFrames: ``stages`` (one row a stage), ``traffic`` (requests per bucket),
    ``devices`` (one row a host, device and metric), ``energy`` (one row a device: its measured split,
    empty without power samples), ``verdicts`` (the bottlenecks, most important first)."""
    pd = _pandas()
    stages = pd.DataFrame([{
        "stage": s.name, "count": s.count, "p50_ms": s.latency_ms.p50, "p95_ms": s.latency_ms.p95,
        "p99_ms": s.latency_ms.p99, "mean_ms": s.latency_ms.mean, "share": s.share, "self_share": s.self_share,
        "self_ms_mean": s.self_ms_mean, "queue_p95_ms": s.queue_ms.p95 if s.queue_ms else None,
        "error_rate": s.error_rate, "timeout_rate": s.timeout_rate,
        "batch_mean": s.batch.mean if s.batch else None, "batch_p99": s.batch.p99 if s.batch else None,
        "dynamic_shape": bool(s.shapes and s.shapes.dynamic_shape),
        "flops_per_byte": s.intensity.flops_per_byte if s.intensity else None,
        "engines": ",".join(sorted(s.engines or {})),
        **{f"energy_per_{unit}_j{end}": None if b is None else getattr(b, field)
           for unit, b in (("item", s.energy_per_item_j), ("request", s.energy_per_request_j))
           for end, field in (("", "mean"), ("_lo", "lo"), ("_hi", "hi"))},
    } for s in portrait.stages])
    traffic = portrait.traffic
    series = pd.DataFrame(traffic.series if traffic else [], columns=["start", "requests"])
    if len(series):
        series["ts"] = pd.to_datetime(series.pop("start"), unit="s", utc=True)
        series["rps"] = series["requests"] / traffic.bucket_s
        series = series[["ts", "requests", "rps"]]
    devices = pd.DataFrame([{"host": m.host, "device": m.device, "metric": m.metric, "mean": m.mean, "p95": m.p95,
                             "max": m.max, "seconds": m.seconds} for m in portrait.devices.metrics],
                           columns=["host", "device", "metric", "mean", "p95", "max", "seconds"])
    verdicts = pd.DataFrame([{"kind": v.kind, "title": v.title, "score": v.score, "advice": v.advice,
                              "evidence": v.evidence} for v in portrait.bottlenecks],
                            columns=["kind", "title", "score", "advice", "evidence"])
    columns = ["device", "measured_j", "idle_w", "idle_j", "attributed_j", "unattributed_j", "source", "idle_from"]
    energy = pd.DataFrame([{"device": key, "measured_j": d.measured_j, "idle_w": d.idle_w, "idle_j": d.idle_j,
                            "attributed_j": sum(d.attributed_j.values()), "unattributed_j": d.unattributed_j,
                            "source": d.source, "idle_from": d.idle_from}
                           for key, d in sorted((portrait.energy.devices if portrait.energy else {}).items())],
                          columns=columns)
    return {"stages": stages, "traffic": series, "devices": devices, "energy": energy, "verdicts": verdicts}


def _frame(paths, kind: str, *, service, host, since, until, equal: dict):
    import pyarrow as pa
    import pyarrow.compute as pc

    from .reading import read_files
    from .run import parse_time

    pd = _pandas()
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    start_ns, end_ns = parse_time(since, "since"), parse_time(until, "until")
    skipped: dict = {}
    frames = []
    for found in read_files([str(p) for p in paths], kind, service=service, host=host, skipped=skipped):
        table = found.table
        conditions = [pc.equal(table.column(column).cast(pa.string()), value) if column in table.column_names
                      else pa.array([False] * table.num_rows) for column, value in equal.items() if value is not None]
        if start_ns is not None:
            conditions.append(pc.greater_equal(table.column("ts_ns"), start_ns))
        if end_ns is not None:
            conditions.append(pc.less(table.column("ts_ns"), end_ns))
        if conditions:  # one mask: each condition was computed on the whole table
            table = table.filter(functools.reduce(pc.and_, conditions))
        frame = table.to_pandas()
        frame["service"], frame["host"], frame["run"] = found.run.service, found.run.host, str(found.run.run_dir)
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(frame):
        frame.insert(0, "ts", pd.to_datetime(frame["ts_ns"], unit="ns", utc=True))
        for column in ("stage", "engine", "status", "shape", "device", "metric"):
            if column in frame.columns:
                frame[column] = frame[column].astype("string")
        if kind == "spans":
            frame["dur_ms"] = frame["dur_ns"] / 1e6
            frame["queue_ms"] = frame["queue_ns"] / 1e6 if "queue_ns" in frame.columns else None
        frame = frame.sort_values("ts", kind="stable", ignore_index=True)
    frame.attrs["skipped"] = skipped
    return frame


def _pandas():
    try:
        import pandas
    except ImportError:
        raise LoadprobeError("pandas is not installed: pip install 'loadprobe[pandas]' to read recordings as "
                             "DataFrames") from None
    return pandas
