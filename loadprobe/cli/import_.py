"""``loadprobe import``: convert existing request logs (CSV, JSONL) into loadprobe runs."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from .._errors import LoadprobeError

# Kept literal so that ``loadprobe --help`` does not load pyarrow; tests check them
# against loadprobe.record.importer.PRESETS and UNITS.
_PRESETS = ["azure-llm-2023", "mooncake"]
_UNITS = ["s", "ms", "us", "ns"]


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", default="loadprobe-data", show_default=True, type=click.Path(file_okay=False),
              help="Directory to write the runs into (a run per file; an OTLP file's, a run per service).")
@click.option("--preset", type=click.Choice(_PRESETS), help="Column mapping of a public trace.")
@click.option("--ts-col", help="Column with each request's start time (default: timestamp, ts or time).")
@click.option("--latency-col", help="Column with each request's latency (default: none, durations stay empty).")
@click.option("--stage-col", help="Column naming the request's kind, e.g. the route (default: 'request').")
@click.option("--batch-col", help="Column with the batch size.")
@click.option("--tokens-in-col", help="Column with prompt (context) tokens.")
@click.option("--tokens-out-col", help="Column with generated tokens.")
@click.option("--id-col", help="Column with the request id (default: generated).")
@click.option("--status-col", help="Column with the outcome: HTTP code or text (default: ok).")
@click.option("--ts-unit", type=click.Choice(_UNITS), help="Unit of numeric timestamps (default: by magnitude).")
@click.option("--ts-format", help="strptime format of text timestamps that are not ISO-8601, e.g. '%d/%m/%Y %H:%M:%S'.")
@click.option("--latency-unit", type=click.Choice(_UNITS),
              help="Unit of latencies (default: from a _s/_ms/_us/_ns suffix).")
@click.option("--origin", metavar="ISO", help="Start of relative timestamps [default: 2024-01-01T00:00:00Z].")
@click.option("--service", help="Service name (default: the file's name without extensions; OTLP: each "
                                "resource's service.name).")
@click.option("--host", help="Host name (default: imported; OTLP: each resource's host.name).")
@click.option("--attr", "attributes", multiple=True, metavar="FIELD=KEY",
              help="OTLP files: read FIELD (batch, shape, engine, queue_ns, flops, bytes, tokens_in, tokens_out, "
                   "request_id) from the span attribute KEY (repeatable).")
def import_command(files, output, preset, ts_col, latency_col, stage_col, batch_col, tokens_in_col,
                   tokens_out_col, id_col, status_col, ts_unit, ts_format, latency_unit, origin, service, host,
                   attributes):
    """Convert request logs (FILE: .csv, .tsv, .jsonl, optionally .gz) and OpenTelemetry trace files
    (OTLP/JSON lines or OTLP protobuf, as the Collector's file exporter writes them, optionally gzipped)
    into runs loadprobe analyses.

    A log's rows become request spans; an OTLP file's spans keep their parents (requests and their
    stages), a run per service. The input files are only read.

    \b
    Examples:
        loadprobe import --preset azure-llm-2023 AzureLLMInferenceTrace_code.csv
        loadprobe import requests.csv --ts-col start --latency-col latency_ms --stage-col route
        loadprobe import traces.jsonl --attr batch=app.batch_size
    """
    from ..record.importer import import_log
    from ..record.otlp import sniff

    log_options = {"--preset": preset, "--ts-col": ts_col, "--latency-col": latency_col, "--stage-col": stage_col,
                   "--batch-col": batch_col, "--tokens-in-col": tokens_in_col, "--tokens-out-col": tokens_out_col,
                   "--id-col": id_col, "--status-col": status_col, "--ts-unit": ts_unit, "--ts-format": ts_format,
                   "--latency-unit": latency_unit, "--origin": origin}
    for path in files:
        kind = sniff(path)
        if kind is not None:
            _import_otlp(path, kind, output, attributes, service, host,
                         [option for option, value in log_options.items() if value is not None])
            continue
        if attributes:
            raise LoadprobeError(f"{path}: --attr is for OpenTelemetry (OTLP) files, and this is a request log; "
                                 "name its columns with --batch-col, --tokens-in-col ...")
        result = import_log(
            path, output, preset=preset, ts_col=ts_col, latency_col=latency_col, stage_col=stage_col,
            batch_col=batch_col, tokens_in_col=tokens_in_col, tokens_out_col=tokens_out_col,
            request_id_col=id_col, status_col=status_col, ts_unit=ts_unit, latency_unit=latency_unit,
            ts_format=ts_format, origin=origin, service=service, host=host,
        )
        click.echo(summary(Path(path).name, result))


def _import_otlp(path: str, kind: str, output: str, attributes, service, host, log_options: list[str]) -> None:
    from ..record.otlp_import import import_otlp, left_out

    if log_options:
        raise LoadprobeError(f"{path}: an OpenTelemetry (OTLP) file, whose spans name their own fields: "
                             f"{', '.join(log_options)} {'is' if len(log_options) == 1 else 'are'} for CSV/JSONL "
                             "logs; remap span attributes with --attr FIELD=KEY")
    result = import_otlp(path, output, kind=kind, attributes=attributes, service=service, host=host)
    name = Path(path).name
    for run in result.runs:
        click.echo(summary(name, run, what=f"{result.requests.get(run.run_dir, 0):,} requests, {run.rows:,} spans written"))
    if result.skipped:
        click.echo(f"{name}: left out: {left_out(result.skipped)}")


def summary(name: str, result, what: str | None = None) -> str:
    """One line: ``trace.csv: 8,819 requests, 0 skipped, 2023-11-16 18:17:03 .. 19:14:19 UTC (57.3 min) -> dir``."""
    skipped = f"{result.rows_skipped:,} skipped"
    if result.skipped:
        skipped += " (" + ", ".join(f"{reason}: {count:,}" for reason, count in result.skipped.items()) + ")"
    what = what or f"{result.rows:,} requests, {skipped}"
    first, last = (datetime.fromtimestamp(ns / 1e9, timezone.utc) for ns in (result.first_ns, result.last_ns))
    end = last.strftime("%H:%M:%S" if last.date() == first.date() else "%Y-%m-%d %H:%M:%S")
    seconds = (result.last_ns - result.first_ns) / 1e9
    span = f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:,.1f} min"
    return (f"{name}: {what}, {first:%Y-%m-%d %H:%M:%S} .. {end} UTC ({span}) "
            f"-> {result.run_dir}")
