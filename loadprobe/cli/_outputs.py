"""The one rule for what a command writes: an output that exists is refused before any work, and
replaced only with ``--force``. Every writing command asks here, so none overwrites silently
and none refuses what another replaces.

Usage::

    refuse_existing([out / "portrait.json", out / "portrait.html"], force)   # LoadprobeError naming the first
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from .._errors import LoadprobeError

__all__ = ["refuse_existing"]


def refuse_existing(paths: Iterable[str | os.PathLike], force: bool, option: str = "-o") -> None:
    """Raise a LoadprobeError for the first of ``paths`` that exists (a dangling link too), unless ``force``; and,
    forced or not, for one that would go under a file (no folder can be made there)."""
    paths = list(paths)
    for path in paths:
        blocked = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
        if blocked is not None:
            raise LoadprobeError(f"{path}: {blocked} is a file, not a folder; choose another {option}")
    if force:
        return
    for path in paths:
        if Path(path).exists() or Path(path).is_symlink():
            raise LoadprobeError(f"{path} exists; pass --force to replace it or choose another {option}")
