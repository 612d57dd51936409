"""The ``loadprobe`` command line: one subcommand per module in this package.

Every failure the user can fix prints one line and exits 2; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import sys

import click

from .._errors import LoadprobeError
from .._version import __version__


class _Group(click.Group):
    """Turns LoadprobeError and unexpected failures into one line, unless --debug."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LoadprobeError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"loadprobe: error: {exc}", err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"loadprobe: internal error: {exc!r} (run with --debug for the traceback)", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadprobe")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Take a load portrait of an ML inference service and turn it into a hardware plan."""
    ctx.obj = {"debug": debug}


def _register() -> None:
    from .align import align
    from .analyze import analyze
    from .demo import demo
    from .import_ import import_command
    from .load import load
    from .record import record
    from .recommend import recommend
    from .report import report
    from .simulate import simulate
    from .tco import tco
    from .validate import validate

    main.add_command(align)
    main.add_command(analyze)
    main.add_command(demo)
    main.add_command(import_command)
    main.add_command(load)
    main.add_command(record)
    main.add_command(recommend)
    main.add_command(report)
    main.add_command(simulate)
    main.add_command(tco)
    main.add_command(validate)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
