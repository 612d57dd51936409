"""Find recorded data: runs and their files under directories, globs or object-store URIs.

Nothing here reads rows; it lists files and run.json metadata so the map step
(``map_step.py``, through ``reading.py``) can read each file independently, wherever it
runs. Local paths need nothing beyond pyarrow; ``s3://``, ``gs://`` and other URIs go
through fsspec when the matching package is installed (``pip install s3fs`` / ``gcsfs``).

Usage::

    runs, skipped = discover(["data/"], service="vision")
    for run in runs:
        print(run.host, run.service, run.run_id, len(run.span_files))
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
from dataclasses import dataclass, field

from .._errors import LoadprobeError, listed, shape_problem
from ..formats import RUN, UnreadableVersionError
from ..record.rundir import safe_name
from ..schema import SchemaVersionError

_DATA_FILE = re.compile(r"^(\.)?(spans|samples)-(\d{5,})\.(parquet|arrows)$")


@dataclass
class Run:
    """One recording process (or one imported log): its identity and files."""

    root: str  # the URI/path prefix the files are relative to, for opening them
    run_dir: str
    host: str
    service: str
    run_id: str
    info: dict = field(default_factory=dict)  # run.json, {} when absent
    refused: str | None = None  # why the whole run is not read (its run.json is a newer major)
    span_files: list[str] = field(default_factory=list)
    sample_files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FileRef:
    """A file to map, with what the map step needs to know about its run."""

    path: str
    kind: str  # "spans" | "samples"
    stream: bool  # an unfinished Arrow segment stream rather than Parquet
    host: str
    service: str
    run_id: str
    filesystem_uri: str | None = None  # None: local path


def _is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def filesystem_for(uri: str):
    """(fsspec filesystem, path inside it) for an object-store URI; a clear error if unsupported."""
    try:
        import fsspec
    except ImportError:
        raise LoadprobeError(f"{uri}: reading URIs needs fsspec and its backend; pip install fsspec s3fs "
                             "(or gcsfs for gs://)") from None
    try:
        return fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise LoadprobeError(f"{uri}: cannot open this URI ({exc}); install the fsspec backend for it, "
                             "e.g. pip install s3fs") from None


def _list_local(path: str) -> list[str]:
    path = path[len("file://"):] if path.startswith("file://") else path
    if any(c in path for c in "*?["):
        matches = glob.glob(path, recursive=True)
        out = []
        for m in matches:
            out += _list_local(m) if os.path.isdir(m) else [m]
        return out
    if os.path.isfile(path):
        return [path]
    if os.path.isdir(path):
        out = []
        for dirpath, _dirs, files in os.walk(path):
            out += [os.path.join(dirpath, f) for f in files]
        return out
    raise LoadprobeError(f"{path}: no such file or directory; give a directory written by "
                         "loadprobe record / loadprobe.start / loadprobe import")


def _list_uri(uri: str) -> list[str]:
    fs, path = filesystem_for(uri)
    if any(c in path for c in "*?["):
        paths = fs.glob(path)
    elif fs.isfile(path):
        paths = [path]
    else:
        paths = fs.find(path)
    protocol = uri.split("://", 1)[0]
    return [f"{protocol}://{p}" if "://" not in p else p for p in paths]


def name_matches(name: str, pattern: str) -> bool:
    """Whether a run's recorded service or host ``name`` is what ``pattern`` asks for: an fnmatch pattern, or a
    name as given before the recorder stored it directory-safe (``rundir.safe_name``: "my svc" is kept as
    "my_svc", and asking for "my svc" finds it)."""
    return fnmatch.fnmatchcase(name, pattern) or name == safe_name(pattern)


def discover(paths, *, service: str | None = None, host: str | None = None):
    """Runs under ``paths`` and the files that are not loadprobe data, as ``(runs, skipped)``.

    ``service`` and ``host`` are fnmatch patterns. ``skipped`` maps paths to a reason.
    Raises LoadprobeError when nothing usable is found.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    runs: dict[str, Run] = {}
    skipped: dict[str, str] = {}
    for given in map(str, paths):
        files = _list_uri(given) if _is_uri(given) else _list_local(given)
        for path in sorted(files):
            name = path.rsplit("/", 1)[-1]
            match = _DATA_FILE.match(name)
            if name == "run.json":
                run = _run_for(runs, path)
                try:
                    run.info = _checked_run_info(_read_run_json(path, skipped), path, skipped)
                except SchemaVersionError as exc:
                    run.refused = skipped[path] = str(exc)
                continue
            if match is None:
                if not name.startswith(".") and name.endswith((".parquet", ".arrows")):
                    skipped[path] = "not named spans-NNNNN.parquet or samples-NNNNN.parquet"
                elif not name.startswith(".") and not name.endswith(".tmp"):
                    skipped[path] = "not loadprobe data"
                continue
            run = _run_for(runs, path)
            (run.span_files if match.group(2) == "spans" else run.sample_files).append(path)
    selected, unwritten = [], []
    for run in runs.values():
        run.host = str(run.info.get("host") or run.host)
        run.service = str(run.info.get("service") or run.service)
        if run.refused:  # written by a newer loadprobe: its files may not mean what we think
            skipped.update((path, run.refused) for path in run.span_files + run.sample_files)
            continue
        if service and not name_matches(run.service, service):
            continue
        if host and not name_matches(run.host, host):
            continue
        run.span_files = _drop_converted_streams(run.span_files)
        run.sample_files = _drop_converted_streams(run.sample_files)
        if run.span_files or run.sample_files:
            selected.append(run)
        elif (run.info.get("counters") or {}).get("spans_recorded"):
            unwritten.append(run)
    if not selected:
        where = ", ".join(map(str, paths))
        refused = [run for run in runs.values() if run.refused]
        if refused:
            raise LoadprobeError(f"{where}: no run could be read: {refused[0].refused}"
                                 + (f" (and {len(refused) - 1:,} more run(s) like it)" if len(refused) > 1 else ""))
        if unwritten:  # a recorder ran but nothing reached the disk: say so, not "no data"
            raise unwritten_error(where, unwritten)
        raise LoadprobeError(
            f"{where}: no loadprobe data found (expected <host>/<service>/<run>/spans-*.parquet"
            + (f" for service={service!r}" if service else "") + (f" host={host!r}" if host else "")
            + "); record with 'loadprobe record' or convert logs with 'loadprobe import'")
    selected.sort(key=lambda r: (r.host, r.service, r.run_id))
    return selected, skipped


def _run_for(runs: dict[str, Run], path: str) -> Run:
    run_dir = path.rsplit("/", 1)[0] if "/" in path else "."
    if run_dir not in runs:
        parts = run_dir.rstrip("/").split("/")
        run_id = parts[-1] if parts else "run"
        service = parts[-2] if len(parts) >= 2 else "service"
        host = parts[-3] if len(parts) >= 3 else "host"
        runs[run_dir] = Run(root=run_dir, run_dir=run_dir, host=host, service=service, run_id=run_id)
    return runs[run_dir]


def _read_run_json(path: str, skipped: dict[str, str]) -> dict:
    """run.json as a dict; {} (and a reason in ``skipped``) when unreadable.

    Raises SchemaVersionError when a newer major version wrote it.
    """
    try:
        text = _open_text(path)
        info = json.loads(text)
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        skipped[path] = f"unreadable run.json ({exc}); its run is analysed without it"
        return {}
    tag = info.get("schema", RUN.value)
    try:
        RUN.check(tag, path)
    except UnreadableVersionError:  # damaged, not newer: the spans carry their own tag
        skipped[path] = f"run.json: schema {tag!r} is not like {RUN.value!r}; its run is analysed without it"
        return {}
    return info


_NS = {"type": ["integer", "null"], "minimum": 0, "maximum": 2**63 - 1}
_TEXT = {"type": ["string", "null"]}
_RUN_JSON = {  # the fields of run.json that analysis reads, in the types it reads them as; others are free
    "type": "object",
    "properties": {
        "host": _TEXT, "service": _TEXT, "role": _TEXT, "started_ns": _NS, "stopped_ns": _NS,
        "counters": {"type": ["object", "null"]},
        "hardware": {"type": ["object", "null"], "properties": {
            "cpu": {"type": ["object", "null"], "properties": {
                "model": _TEXT, "logical_cores": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**20}}},
            "memory_bytes": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**63 - 1},
            "gpus": {"type": ["array", "null"], "items": {"type": "object", "properties": {"name": _TEXT}}}}},
    },
}


def _checked_run_info(info: dict, path: str, skipped: dict[str, str]) -> dict:
    """``info``, or {} (its run analysed without it, like an unreadable one) when a field that
    analysis reads has the wrong type; checked here, once, so nothing later meets it."""
    problem = shape_problem(info, _RUN_JSON) if info else None
    if problem is None:
        return info
    skipped[path] = f"run.json {problem}; its run is analysed without it"
    return {}


def _open_text(path: str) -> str:
    if _is_uri(path):
        fs, inner = filesystem_for(path)
        with fs.open(inner, "r", encoding="utf-8") as handle:
            return handle.read()
    with open(path[7:] if path.startswith("file://") else path, encoding="utf-8") as handle:
        return handle.read()


def unwritten_error(where: str, runs) -> LoadprobeError:
    """Recorders ran and counted spans, but none reached the disk: say so, not "no data"."""
    counters = [run.info["counters"] for run in runs]
    recorded = sum(c.get("spans_recorded") or 0 for c in counters)
    errors = sum(c.get("write_errors") or 0 for c in counters)
    return LoadprobeError(
        f"{where}: {recorded:,} span(s) recorded, none written ({errors:,} write error(s) in the run.json of "
        f"{listed(run.run_dir for run in runs)}); free disk space or fix the directory's permissions and record again")


def _drop_converted_streams(files: list[str]) -> list[str]:
    """A stream whose Parquet file exists was converted before a crash stopped its deletion."""
    finished = set()
    for f in files:
        m = _DATA_FILE.match(f.rsplit("/", 1)[-1])
        if m.group(4) == "parquet":
            finished.add(m.group(3))
    out = []
    for f in files:
        m = _DATA_FILE.match(f.rsplit("/", 1)[-1])
        if m.group(4) == "arrows" and m.group(3) in finished:
            continue
        out.append(f)
    return sorted(out)


def describe_skipped(skipped: dict[str, str], shown: int = 3) -> str:
    """``path: reason; path: reason; ... and N more``: the files a message names, span files first."""
    order = sorted(skipped, key=lambda path: (_DATA_FILE.match(path.rsplit("/", 1)[-1]) is None, path))
    text = "; ".join(f"{path}: {skipped[path]}" for path in order[:shown])
    return text + (f"; and {len(order) - shown:,} more" if len(order) > shown else "")


def file_refs(runs: list[Run]) -> list[FileRef]:
    """Every file to map, run by run."""
    refs = []
    for run in runs:
        for kind, files in (("spans", run.span_files), ("samples", run.sample_files)):
            for path in files:
                refs.append(FileRef(path=path, kind=kind, stream=path.endswith(".arrows"), host=run.host,
                                    service=run.service, run_id=run.run_id,
                                    filesystem_uri=path if _is_uri(path) else None))
    return refs


def open_input(ref: FileRef):
    """A readable binary file object (or local path) for pyarrow."""
    if ref.filesystem_uri is None:
        return ref.path[7:] if ref.path.startswith("file://") else ref.path
    fs, inner = filesystem_for(ref.path)
    return fs.open(inner, "rb")
