"""What is wrong with a pipeline.yaml: one ``Problem`` per place, and the ``PipelineError`` that lists them.

Usage::

    problem = Problem(3, 5, "stages[0].engine", "unknown engine 'npu9'", "pipeline.yaml")
    str(problem)                       # "pipeline.yaml:3:5: stages[0].engine: unknown engine 'npu9'"
    raise PipelineError("pipeline.yaml", [problem])
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import LoadprobeError

__all__ = ["MAX_SHOWN", "PipelineError", "Problem"]

MAX_SHOWN = 100  # problems listed in a PipelineError message


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a file: where (1-based line and column, and the field path) and what."""

    line: int
    column: int
    path: str  # "stages[1].batch.size"; "" for the file as a whole
    message: str
    source: str = "<string>"

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.source}:{self.line}:{self.column}: {where}{self.message}"


class PipelineError(LoadprobeError):
    """A pipeline file with problems; the message lists each one on its own line after a summary."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = list(problems)
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        summary = f"{source}: {count}; not a valid pipeline.yaml v1 (fields: docs/pipeline.md)"
        lines = [summary, *map(str, problems[:MAX_SHOWN])]
        if len(problems) > MAX_SHOWN:
            lines.append(f"{source}: ... and {len(problems) - MAX_SHOWN:,} more")
        super().__init__("\n".join(lines))
