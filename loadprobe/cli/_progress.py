"""A bar on stderr for long work, fed by the ``progress(done, total)`` callbacks of the analysis and the planner.

Usage::

    with ProgressBar("analysing", least=20, quiet=as_json) as progress:
        run_analysis(paths, progress=progress)
"""

from __future__ import annotations

import sys

import click


class ProgressBar:
    """``progress(done, total)``: drawn once ``total`` reaches ``least`` steps, and only where stderr is a terminal
    (a pipe, a CI log or ``--json`` output gets nothing, so one-line errors stay one line)."""

    def __init__(self, label: str, *, least: int = 1, quiet: bool = False) -> None:
        self.label, self.least, self.quiet = label, least, quiet
        self._bar, self._done = None, 0

    def __call__(self, done: int, total: int) -> None:
        if self.quiet or total < self.least or not sys.stderr.isatty():
            return
        if self._bar is None:
            self._bar = click.progressbar(length=total, label=self.label, file=sys.stderr)
            self._bar.__enter__()
        self._bar.update(done - self._done)
        self._done = done

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar, self._done = None, 0
