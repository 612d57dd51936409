"""``loadprobe import``: convert existing request logs (CSV, JSONL) into loadprobe runs."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

# Kept literal so that ``loadprobe --help`` does not load pyarrow; tests check them
# against loadprobe.record.importer.PRESETS and UNITS.
_PRESETS = ["azure-llm-2023", "mooncake"]
_UNITS = ["s", "ms", "us", "ns"]


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", default="loadprobe-data", show_default=True, type=click.Path(file_okay=False),
              help="Directory to write the runs into (one run per file).")
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
@click.option("--service", help="Service name (default: the file's name without extensions).")
@click.option("--host", help="Host name (default: imported).")
def import_command(files, output, preset, ts_col, latency_col, stage_col, batch_col, tokens_in_col,
                   tokens_out_col, id_col, status_col, ts_unit, ts_format, latency_unit, origin, service, host):
    """Convert request logs (FILE: .csv, .tsv, .jsonl, optionally .gz) into runs loadprobe analyses.

    Each row becomes one request span; the input files are only read.

    \b
    Examples:
        loadprobe import --preset azure-llm-2023 AzureLLMInferenceTrace_code.csv
        loadprobe import requests.csv --ts-col start --latency-col latency_ms --stage-col route
    """
    from ..record.importer import import_log

    for path in files:
        result = import_log(
            path, output, preset=preset, ts_col=ts_col, latency_col=latency_col, stage_col=stage_col,
            batch_col=batch_col, tokens_in_col=tokens_in_col, tokens_out_col=tokens_out_col,
            request_id_col=id_col, status_col=status_col, ts_unit=ts_unit, latency_unit=latency_unit,
            ts_format=ts_format, origin=origin, service=service, host=host,
        )
        click.echo(summary(Path(path).name, result))


def summary(name: str, result) -> str:
    """One line: ``trace.csv: 8,819 requests, 0 skipped, 2023-11-16 18:17:03 .. 19:14:19 UTC (57.3 min) -> dir``."""
    skipped = f"{result.rows_skipped:,} skipped"
    if result.skipped:
        skipped += " (" + ", ".join(f"{reason}: {count:,}" for reason, count in result.skipped.items()) + ")"
    first, last = (datetime.fromtimestamp(ns / 1e9, timezone.utc) for ns in (result.first_ns, result.last_ns))
    end = last.strftime("%H:%M:%S" if last.date() == first.date() else "%Y-%m-%d %H:%M:%S")
    seconds = (result.last_ns - result.first_ns) / 1e9
    span = f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:,.1f} min"
    return (f"{name}: {result.rows:,} requests, {skipped}, {first:%Y-%m-%d %H:%M:%S} .. {end} UTC ({span}) "
            f"-> {result.run_dir}")
