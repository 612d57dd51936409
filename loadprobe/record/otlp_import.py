"""Import OpenTelemetry trace files (OTLP/JSON lines or OTLP protobuf, optionally gzipped) as loadprobe runs.

Each (host, service) found in the file's resources becomes a run of its own,
``<output>/<host>/<service>/import-<file>-<time>/``, with ``run.json`` (role ``imported``)
written last; a failed import takes back everything it wrote. The file is read one message at a
time and written in batches, so memory stays bounded whatever its size. Which span becomes a
request, which attribute fills which column and how GenAI spans open into queue, prefill and
decode: ``record/otlp_spans.py``.

Usage::

    from loadprobe.record.otlp_import import import_otlp

    result = import_otlp("traces.jsonl", "data/", attributes=["batch=app.batch_size"])
    for run in result.runs:
        print(run.run_dir, run.rows)
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .._errors import LoadprobeError
from . import otlp, rundir
from .importer import ImportResult, SpanFiles, file_sha256, file_stem, imported_run_info, put_new
from .otlp_spans import AttributeKeys, Converter


def left_out(skipped: dict[str, int]) -> str:
    """``spans with no span id: 3, a message cut short at the end of the file: 1``."""
    return ", ".join(f"{reason}: {count:,}" for reason, count in skipped.items())


@dataclass(frozen=True)
class OtlpImportResult:
    """What one OTLP file became: a run per (host, service); ``requests`` maps each run directory
    to its number of requests; ``skipped``: spans left out, by reason."""

    runs: list[ImportResult]
    requests: dict = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    kind: str = "json"


def import_otlp(path: str | os.PathLike, output_dir: str | os.PathLike = "loadprobe-data", *,
                kind: str | None = None, attributes=(), service: str | None = None,
                host: str | None = None) -> OtlpImportResult:
    """Write the OTLP traces at ``path`` as new runs under ``output_dir``.

    ``kind``: "json" or "proto" (default: told from the file's first bytes); ``attributes``:
    ``FIELD=KEY`` remappings (``otlp_spans.AttributeKeys.parse``); ``service``/``host``: put every
    span there instead of its resource's ``service.name``/``host.name``. Raises LoadprobeError,
    naming the file, on bad input; the input is only read.
    """
    source = Path(path)
    where = str(source)
    keys = AttributeKeys.parse(attributes)
    if not source.is_file():
        raise LoadprobeError(f"{where}: {'not a file' if source.exists() else 'no such file'}; "
                             "give the path of an OTLP traces file")
    kind = kind or otlp.sniff(source)
    converter = Converter(keys, service=service and rundir.safe_name(service), host=host and rundir.safe_name(host))
    run_id = rundir.imported_run_id(file_stem(source), time.time_ns())
    files: dict[tuple[str, str], SpanFiles] = {}

    def write(group: tuple[str, str], table) -> None:
        if group not in files:
            group_host, group_service = (rundir.safe_name(name) for name in group)
            files[group] = SpanFiles(rundir.run_path(output_dir, group_host, group_service, run_id))
        files[group].write(table)

    try:
        for spans in otlp.read_file(source, kind, converter.skipped):
            for group, table in converter.add(spans):
                write(group, table)
        for group, table in converter.drain(final=True):
            write(group, table)
        for written in files.values():
            written.close()
        if not files:
            why = f" (left out: {left_out(converter.skipped)})" if converter.skipped else ""
            raise LoadprobeError(f"{where}: no spans to import{why}; check that the file holds OTLP traces")
        source_info = {"path": str(source.resolve()), "sha256": file_sha256(source), "format": f"otlp-{kind}",
                       "attributes": {name: list(chosen) for name, chosen in keys.keys.items()},
                       "spans": converter.spans, "spans_skipped": converter.skipped}
        for (group_host, group_service), written in files.items():
            info = imported_run_info(rundir.safe_name(group_host), rundir.safe_name(group_service), written,
                                     source_info)
            put_new(lambda: rundir.write_run_json(written.run_dir, info, overwrite=False),
                    written.run_dir / rundir.RUN_JSON)
    except BaseException as exc:
        for written in files.values():
            written.discard()
        if isinstance(exc, OSError):  # reading errors were turned into LoadprobeError: this is the output
            raise LoadprobeError(f"{where}: cannot write the runs under {output_dir} ({exc}); "
                                 "check that directory or choose another with -o") from None
        raise
    runs = [ImportResult(written.run_dir, written.rows, {}, written.first_ns, written.last_ns)
            for written in files.values()]
    requests = {files[group].run_dir: count for group, count in converter.requests.items() if group in files}
    return OtlpImportResult(runs, requests, dict(converter.skipped), kind)
