"""The ``loadprobe`` command line: one subcommand per module in this package.

Every failure the user can fix prints one line and exits 2 -- a missing optional dependency
names the extra to install; ``--debug``, anywhere before a ``--``, shows the traceback instead.
Ctrl-C exits 130 saying what was kept (``load`` and ``demo`` first print what they had done).
"""

from __future__ import annotations

import sys

import click

from .._errors import LoadprobeError
from .._version import __version__


# Optional dependencies by top-level module: the extra of pyproject.toml that installs each.
EXTRAS = {"PIL": "demo", "fastapi": "demo", "uvicorn": "demo", "starlette": "asgi", "flask": "wsgi",
          "onnxruntime": "onnxruntime", "onnx": "onnxruntime", "torch": "torch", "dask": "dask",
          "distributed": "dask", "fsspec": "cloud", "numba": "fast", "prometheus_client": "prometheus"}


def missing_extra(exc: ImportError) -> str | None:
    """The one-line fix for an optional dependency that is not installed, or None if it is not one."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return f"this needs {top}, which is not installed: pip install 'loadprobe[{extra}]'"


class _Group(click.Group):
    """Turns LoadprobeError and unexpected failures into one line, unless --debug."""

    def main(self, args=None, *rest, **kwargs):
        # --debug is accepted after the subcommand too; never past "--" (the recorded command's own).
        args = list(sys.argv[1:] if args is None else args)
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            args = ["--debug"] + [a for a in args[:end] if a != "--debug"] + args[end:]
        return super().main(args, *rest, **kwargs)

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
        except KeyboardInterrupt:  # Ctrl-C: say what became of the outputs, not click's bare "Aborted!"
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"loadprobe: interrupted; {ctx.invoked_subcommand or 'the command'} stopped before its next "
                       "output: files already written are kept whole, none is left half-written", err=True)
            ctx.exit(130)
        except BrokenPipeError:  # `loadprobe ... | head`: the reader left; what was asked is done
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            ctx.exit(141)
        except Exception as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            fix = missing_extra(exc) if isinstance(exc, ImportError) else None
            if fix is not None:
                click.echo(f"loadprobe: error: {fix}", err=True)
                ctx.exit(2)
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
    from .catalog import catalog
    from .demo import demo
    from .export import export
    from .import_ import import_command
    from .load import load
    from .record import record
    from .recommend import recommend
    from .report import report
    from .simulate import simulate
    from .tco import tco
    from .validate import validate
    from .verify import verify

    main.add_command(align)
    main.add_command(analyze)
    main.add_command(catalog)
    main.add_command(demo)
    main.add_command(export)
    main.add_command(import_command)
    main.add_command(load)
    main.add_command(record)
    main.add_command(recommend)
    main.add_command(report)
    main.add_command(simulate)
    main.add_command(tco)
    main.add_command(validate)
    main.add_command(verify)


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
