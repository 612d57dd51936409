"""The run directory: where a run's files go, what the run is called, and its run.json.

One owner for what the recorder and the importer both write (docs/data-format.md#layout)::

    <output>/<host>/<service>/<run>/run.json
    <output>/<host>/<service>/<run>/spans-00001.parquet ...

Usage::

    from loadprobe.record import rundir

    run_dir = rundir.create(rundir.run_path("data", rundir.host_name(), "vision",
                                            rundir.recorded_run_id(os.getpid(), time.time_ns())))
    rundir.write_run_json(run_dir, rundir.run_document(host=..., service="vision", ...), room=True)
    rundir.run_is_dead(run_dir)   # its process ended on this host: its files are final

Standard library only (psutil is imported by ``run_is_dead`` alone): the recorder uses it in the service.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from .._files import write_file
from .._version import __version__
from ..formats import RUN

RUN_JSON = "run.json"


MAX_NAME_BYTES = 96  # file systems allow 255 bytes a name; room is left for suffixes and temporaries


def safe_name(name: str) -> str:
    """``name`` as a directory name: letters, digits, ``-``, ``_`` and ``.`` kept, the rest ``_``; a
    name longer than ``MAX_NAME_BYTES`` (UTF-8) is cut and ends in a hash of the whole, so that two
    long names stay apart."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name)).strip(".") or "service"
    if len(safe.encode("utf-8")) <= MAX_NAME_BYTES:
        return safe
    import hashlib  # rare: only for long names

    digest = hashlib.sha1(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    cut = safe.encode("utf-8")[:MAX_NAME_BYTES - 11].decode("utf-8", "ignore")
    return f"{cut}-{digest}"


def host_name() -> str:
    """This host's short name, safe as a directory name."""
    return safe_name(socket.gethostname().split(".")[0] or "localhost")


def utc_stamp(ns: int) -> str:
    """Epoch nanoseconds as in run names: ``20261202T143217.532Z``."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(ns // 1_000_000_000)) + f".{ns // 1_000_000 % 1000:03d}Z"


def recorded_run_id(pid: int, started_ns: int) -> str:
    """A recording process's run: ``4217-20261202T143217.532Z``."""
    return f"{pid}-{utc_stamp(started_ns)}"


def imported_run_id(stem: str, imported_ns: int) -> str:
    """An imported log's run: ``import-<file stem>-20261202T143217.532Z``."""
    return f"import-{safe_name(stem)}-{utc_stamp(imported_ns)}"


def run_path(output_dir: str | os.PathLike, host: str, service: str, run_id: str) -> Path:
    return Path(output_dir) / host / service / run_id


def create(path: Path) -> Path:
    """Create a run directory nobody has used: ``path``, else ``path-2``, ``path-3``... (never reused).

    Raises OSError when the folder cannot be made.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
            candidate = path.with_name(f"{path.name}-{n}")


def run_document(*, host: str, service: str, run_id: str, role: str, started_ns: int | None,
                 stopped_ns: int | None, counters: dict, pid: int | None = None, process_started: float | None = None,
                 forked_from: str | None = None, tags: dict | None = None, settings: dict | None = None,
                 hardware: dict | None = None, samplers: dict | None = None, **more) -> dict:
    """run.json's content, every field in its place (docs/data-format.md#runjson); ``more`` follows."""
    return {
        "schema": RUN.value,
        "loadprobe_version": __version__,
        "host": host,
        "service": service,
        "run_id": run_id,
        "pid": pid,
        "process_started": process_started,
        "argv": list(sys.argv),
        "started_ns": started_ns,
        "stopped_ns": stopped_ns,
        "forked_from": forked_from,
        "tags": tags or {},
        "role": role,
        "settings": settings or {},
        "hardware": hardware or {},
        "samplers": samplers or {},
        "counters": counters,
        **more,
    }


def encode(info: dict, *, room: bool = False) -> bytes:
    """run.json's bytes; with ``room``, padded with spaces (valid JSON whitespace) to a 4 KiB multiple
    and at least 1 KiB more, so a later, longer version can be written over it in place."""
    data = (json.dumps(info, indent=2, default=str) + "\n").encode("utf-8")
    if not room:
        return data
    size = -(-(len(data) + 1024) // 4096) * 4096
    return data[:-1] + b" " * (size - len(data)) + b"\n"


def write_run_json(run_dir: Path, info: dict, *, room: bool = False, overwrite: bool = True) -> Path:
    """Write run.json whole, through a temporary file, and to disk before returning (it survives a crash).

    Raises OSError, FileExistsError with ``overwrite=False`` when one is there already.
    """
    return write_file(run_dir / RUN_JSON, encode(info, room=room), durable=True, overwrite=overwrite)


def rewrite_in_place(run_dir: Path, info: dict) -> bool:
    """Write ``info`` over the run.json there, in the room its padding left; False when it does not fit.

    For a full disk: it refuses a new file but not the blocks run.json already has, so the
    counters (loss included) still reach the disk. Never raises.
    """
    data = encode(info)
    try:
        with open(run_dir / RUN_JSON, "r+b") as handle:
            size = os.fstat(handle.fileno()).st_size
            if len(data) > size:
                return False
            handle.write(data[:-1] + b" " * (size - len(data)) + b"\n")
            return True
    except OSError:
        return False  # no run.json at all, or not even that: analysis reports the counters unknown


def read_run_json(run_dir: Path) -> dict | None:
    """run.json's content; None when it is missing, not JSON, or written by a newer loadprobe
    (a damaged ``schema`` tag is read as before: the fields may still be good)."""
    try:
        info = json.loads((run_dir / RUN_JSON).read_text(encoding="utf-8"))
        if not isinstance(info, dict):
            return None
        RUN.refuse_newer(info.get("schema"), str(run_dir / RUN_JSON))
    except (OSError, ValueError):  # NewerVersionError is a ValueError
        return None
    return info


def run_is_dead(run_dir: Path) -> bool:
    """Whether the process that wrote ``run_dir`` on this host has ended (so its files are final).

    A run without a readable run.json, or one a newer loadprobe wrote, is not ours to touch.
    """
    info = read_run_json(run_dir)
    try:
        pid = int(info["pid"])
        started = info.get("process_started")
    except (TypeError, ValueError, KeyError):
        return False
    if info.get("host") != host_name():
        return False
    import psutil

    try:
        proc = psutil.Process(pid)
        return started is not None and abs(proc.create_time() - float(started)) > 1.0  # pid reused
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False
