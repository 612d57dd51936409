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


# Modules that sat directly in loadprobe/ before the package was split by the steps of the data
# flow: ``import loadprobe.tco`` keeps working (with a DeprecationWarning naming the new place).
MOVED = {
    "loadprobe.importer": "loadprobe.record.importer",
    "loadprobe.timestamps": "loadprobe.record.timestamps",
    "loadprobe.dataset": "loadprobe.analysis.dataset",
    "loadprobe.partials": "loadprobe.analysis.partials",
    "loadprobe.engines": "loadprobe.analysis.executors",
    "loadprobe.finalize": "loadprobe.analysis.finalize",
    "loadprobe.traffic": "loadprobe.analysis.traffic",
    "loadprobe.timeline": "loadprobe.analysis.timeline",
    "loadprobe.bottlenecks": "loadprobe.analysis.bottlenecks",
    "loadprobe.roofline": "loadprobe.analysis.roofline",
    "loadprobe.histogram": "loadprobe.analysis.histogram",
    "loadprobe.capture": "loadprobe.align.capture",
    "loadprobe.constraints": "loadprobe.plan.constraints",
    "loadprobe.planner": "loadprobe.plan.planner",
    "loadprobe.plan_sim": "loadprobe.plan.simulation",
    "loadprobe.plan_files": "loadprobe.plan.files",
    "loadprobe.queueing": "loadprobe.estimate.queueing",
    "loadprobe.servicetime": "loadprobe.estimate.servicetime",
    "loadprobe.tco": "loadprobe.estimate.tco",
}


class MovedModules:
    """An import hook, last on ``sys.meta_path``: an old module name imports its new module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self)

    def create_module(self, spec):
        import warnings

        warnings.warn(f"{spec.name} is now {MOVED[spec.name]}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(MOVED[spec.name])  # the same module object, under both names

    def exec_module(self, module) -> None:
        pass  # already executed under its new name


def install_moved_modules() -> None:
    import sys

    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
