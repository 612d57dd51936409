"""``loadprobe validate``: check pipeline.yaml files, printing every problem with its line and column."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .._errors import LoadprobeError


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--schema", "show_schema", is_flag=True, help="Print the JSON Schema of pipeline.yaml v1 and exit.")
@click.option("--catalog", "catalogs", multiple=True, type=click.Path(dir_okay=False),
              help="Extra device catalog file (JSON) for engine devices; repeatable.")
def validate(files, show_schema, catalogs):
    """Check pipeline.yaml FILEs: one line per problem, FILE:LINE:COLUMN: field: what is wrong.

    Exits with status 2 when any file has a problem.

    \b
    Examples:
        loadprobe validate pipeline.yaml
        loadprobe validate --schema > pipeline.schema.json
    """
    # Imported here so that ``loadprobe --help`` loads neither PyYAML nor jsonschema.
    from .. import pipeline

    if show_schema:
        click.echo(json.dumps(pipeline.schema(), indent=2))
        return
    if not files:
        raise click.UsageError("give at least one FILE to check, or --schema")
    catalog = None
    if catalogs:
        from ..catalog import load_catalog

        catalog = load_catalog(*catalogs)
    bad = 0
    for name in files:
        try:
            config = pipeline.load(Path(name), catalog=catalog)
        except pipeline.PipelineError as exc:
            bad += 1
            for problem in exc.problems:
                click.echo(str(problem))
        except LoadprobeError as exc:  # unreadable: one line, and go on with the other files
            bad += 1
            click.echo(str(exc))
        else:
            stages, engines = len(config.stages), len(config.engines)
            click.echo(f"{name}: valid ({stages} stage{'s' * (stages != 1)}, {engines} engine{'s' * (engines != 1)})")
    if bad:
        raise LoadprobeError(f"{bad} of {len(files)} file{'s' * (len(files) != 1)} not valid; "
                             f"pipeline.yaml fields: docs/pipeline.md")
