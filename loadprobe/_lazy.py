"""A package's public names, imported from one of its modules only when first asked for.

Usage, in a package's ``__init__.py``::

    __getattr__ = forward(__name__, "generator")   # loadprobe.load.poisson -> load/generator.py

Keeps ``import loadprobe.load`` (and every import below it) from loading numpy, pyarrow or
the module's other dependencies before they are used.
"""

from __future__ import annotations

import importlib


def forward(package: str, module: str):
    """A module ``__getattr__`` that answers from ``package.module``."""

    def __getattr__(name: str):
        # import_module, not 'from . import': that would ask this __getattr__ for the module again.
        target = importlib.import_module(f"{package}.{module}")
        try:
            return getattr(target, name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
