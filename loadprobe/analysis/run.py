"""``loadprobe.analyze``, implemented: from recorded data to a Portrait (discover -> map -> merge -> finalize).

Usage::

    import loadprobe
    portrait = loadprobe.analyze(["data/"], device="nvidia-l4")
    portrait.save("loadprobe-report/portrait.json")
"""

from __future__ import annotations

from datetime import datetime, timezone

from .._errors import LoadprobeError
from .dataset import describe_skipped, discover, file_refs, unwritten_error
from .parallel import run_map
from .finalize import build_portrait
from .footers import hosts_may_share_request_ids
from .kernels import resolve_kernel
from .llm import recorded_requests
from .map_step import Filters
from .requestjoin import client_requests
from .services import choose, each_service
from ..portrait import Portrait


def parse_time(value, option: str) -> int | None:
    """Epoch ns from an ISO-8601 time (UTC when naive), epoch seconds, or a datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        text = str(value).strip()
        try:
            return int(float(text) * 1e9)
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise LoadprobeError(f"{option} {text!r}: expected an ISO time like 2026-12-02T10:00:00Z "
                                 "or epoch seconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1e9)


def analyze(paths, *, since=None, until=None, service: str | None = None, host: str | None = None,
            device: str | None = None, precision: str | None = None, catalog=(), engine: str = "inprocess",
            workers: int = 1, scheduler: str | None = None, progress=None, kernel: str = "auto",
            slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None) -> Portrait:
    """The load portrait of one service's data under ``paths`` (directories, globs or URIs).

    ``service`` (an fnmatch pattern) chooses the service when ``paths`` hold several; several
    are refused with a LoadprobeError naming them (``services.choose``). A load client's recording
    (``loadprobe load --record``) that shares request ids with the service is joined to it: each
    request counted once, the client's span outermost (``requestjoin.py``).

    ``device`` names a catalog entry for the roofline (default: the recorded GPU or CPU
    when the catalog knows it); ``catalog`` adds device files. ``engine``: "inprocess",
    "process" (``workers`` processes) or "dask" (a local cluster, or ``scheduler``).
    ``kernel``: how each file is aggregated: "auto" (the compiled C kernel when it was built at
    install, else numpy), "c" or "numpy"; all give identical portraits.
    ``slo_ttft_ms`` and ``slo_tpot_ms``: the targets of an LLM service's goodput (``portrait.llm``);
    twice the recorded medians where not given.
    """
    return _analysed(paths, since=since, until=until, service=service, host=host, device=device, precision=precision,
                     catalog=catalog, engine=engine, workers=workers, scheduler=scheduler, progress=progress,
                     kernel=kernel, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms)[0]


def llm_recording(paths, *, since=None, until=None, service: str | None = None, host: str | None = None):
    """The portrait of an LLM service's recording under ``paths`` and its requests, joined:
    ``(portrait, views)``, ``views`` as ``llm.recorded_requests`` gives them plus ``"itl"`` (the shown view's
    gaps between output pieces, a Histogram, or None); LoadprobeError when it holds no LLM request.
    What the LLM simulator fits its step-time model to (``simulator.llm``).

    Usage::

        portrait, views = llm_recording(["data/", "client/"])
        requests = views["service"] or views["client"]
    """
    portrait, part = _analysed(paths, since=since, until=until, service=service, host=host)
    views = recorded_requests(part.llm)
    if views is None:
        raise LoadprobeError(f"{', '.join(map(str, [paths] if isinstance(paths, str) else paths))}: no LLM request "
                             "(a request span with tokens_out: record the engine's probes or OpenTelemetry spans, or "
                             "the client of 'loadprobe load --openai --record')")
    itl = part.llm.itl.get(views["shown"][0])
    views["itl"] = itl if itl is not None and itl.total else None
    return portrait, views


def _analysed(paths, *, since=None, until=None, service=None, host=None, device=None, precision=None, catalog=(),
              engine="inprocess", workers=1, scheduler=None, progress=None, kernel="auto", slo_ttft_ms=None,
              slo_tpot_ms=None):
    """``analyze``'s work: the portrait and the merged map-step partial it was built from."""
    if isinstance(paths, str):
        paths = [paths]
    kernel = resolve_kernel(kernel)  # once: every file is aggregated by this kernel
    since_ns, until_ns = parse_time(since, "--since"), parse_time(until, "--until")
    if since_ns is not None and until_ns is not None and since_ns >= until_ns:
        raise LoadprobeError(f"--since {since} is not before --until {until}")
    runs, skipped = discover(paths, host=host)
    runs, clients = choose(runs, service, ", ".join(map(str, paths)))  # one service (and its load client)
    # The load client's requests, read once (its files are small): the map step joins the server's to them.
    client = client_requests(clients, since_ns, until_ns) if clients else None
    refs = file_refs(runs)
    # The cross-host clock check compares requests seen on several hosts, so it needs the request
    # ids; with one host, or when the files' footers prove that no two hosts share an id (each
    # host's id ranges are disjoint from every other's), it can find nothing and they are not decoded.
    sample_skew = len({r.host for r in runs}) > 1 and hosts_may_share_request_ids(refs)
    filters = Filters(since_ns, until_ns, sample_skew=sample_skew, kernel=kernel, energy=samples_power(runs),
                      client=client)
    # Imported and received spans were timed elsewhere, before their run began: only recorded runs bound theirs.
    windows = {r.run_id: (r.info["started_ns"], r.info.get("stopped_ns")) for r in runs
               if isinstance(r.info.get("started_ns"), int) and r.info.get("role") not in ("imported", "received")}
    part = run_map(refs, filters, windows, engine=engine, workers=workers, scheduler=scheduler,
                   progress=progress)
    if not {ref.path for ref in refs if ref.kind == "spans"} & set(part.files):
        # Device samples alone make no portrait: without spans there is nothing to analyse.
        unwritten = [r for r in runs if not r.span_files and (r.info.get("counters") or {}).get("spans_recorded")]
        if unwritten and not part.skipped:  # the recorder counted spans and wrote none: the disk, not the data
            raise unwritten_error(", ".join(map(str, paths)), unwritten)
        reasons = {**skipped, **part.skipped}
        why = (f"{len(reasons):,} file(s) skipped: {describe_skipped(reasons)}" if reasons else
               "only device samples (samples-*.parquet), no spans-*.parquet")
        raise LoadprobeError(f"{', '.join(map(str, paths))}: no readable span data ({why}); fix or replace those "
                             "files, or record again with 'loadprobe record'")
    part.client_requests = client.count if client is not None else 0
    portrait = build_portrait(part, runs, inputs=list(paths), device=_roofline_device(device, runs, catalog),
                              precision=precision, dataset_skipped=skipped, slo_ttft_ms=slo_ttft_ms,
                              slo_tpot_ms=slo_tpot_ms)
    if not portrait.stages and (since_ns is not None or until_ns is not None):
        # an empty portrait is not an answer: say what the recording covers instead
        raise LoadprobeError(f"{', '.join(map(str, paths))}: no span lies within {_window(since, until)} "
                             f"({portrait.data_quality.rows_filtered:,} read, all outside; the runs cover "
                             f"{_covered(windows)}); widen --since/--until")
    return portrait, part


def services(paths, *, service: str | None = None, host: str | None = None) -> list[str]:
    """The services under ``paths`` that get a portrait each (``loadprobe analyze --each-service``):
    every one matching ``service`` (all when None), the load client's recording joined to the one it
    shares request ids with, or a portrait of its own when it shares none. Pass each, escaped as a
    pattern (``glob.escape``), to ``analyze(service=)``."""
    if isinstance(paths, str):
        paths = [paths]
    runs, _ = discover(paths, host=host)
    names = each_service(runs, service)
    if not names:
        choose(runs, service, ", ".join(map(str, paths)))  # raises: says that nothing matches, and what is there
    return names


def _window(since, until) -> str:
    return " and ".join(part for part in (since and f"--since {since}", until and f"--until {until}") if part)


def _covered(windows: dict) -> str:
    """The recording's time, from its runs' starts and stops (UTC, to the second)."""
    import time

    starts = [a for a, _ in windows.values()]
    stops = [b for _, b in windows.values() if isinstance(b, int)]
    if not starts:
        return "an unknown time"
    show = lambda ns: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))  # noqa: E731
    return f"{show(min(starts))} to {show(max(stops)) if stops else 'an unfinished end'}"


def samples_power(runs) -> bool:
    """Whether any run sampled a power source (NVML, RAPL or another besides psutil and the interpreter's
    CPU, per its run.json): only then is each span's time on its engine worth mapping for energy attribution."""
    return any(name not in ("psutil", "interpreter") and isinstance(state, dict) and state.get("available")
               for run in runs for name, state in _mapping(run.info.get("samplers")).items())


def _mapping(value) -> dict:
    """A run.json object field as a dict: a damaged file may hold anything there."""
    return value if isinstance(value, dict) else {}


def _roofline_device(device: str | None, runs, catalog_files):
    try:
        from ..catalog import load_catalog
    except ImportError:  # pragma: no cover - the catalog ships with the package
        return None
    catalog = load_catalog(*catalog_files)
    if device:
        return catalog.get(device)
    for run in runs:
        hardware = run.info.get("hardware") or {}
        for gpu in hardware.get("gpus") or []:
            match = catalog.match(str(gpu.get("name", "")))
            if match is not None:
                return match
    for run in runs:
        model = ((run.info.get("hardware") or {}).get("cpu") or {}).get("model")
        if model:
            match = catalog.match(str(model))
            if match is not None:
                return match
    return None
