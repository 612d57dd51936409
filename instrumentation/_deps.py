"""Import an adapter's framework, or fail with the install command that fixes it.

Usage, at the top of an adapter module::

    torch = require("torch", extra="torch")
"""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, *, extra: str) -> ModuleType:
    """``import module``; an ImportError naming ``pip install 'loadprobe[extra]'`` when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"loadprobe.instrumentation.{extra} needs {module.split('.')[0]}, which is not installed: "
            f"run pip install 'loadprobe[{extra}]'"
        ) from exc
