"""Importing on demand: public names, modules that moved, optional backends.

``forward``: a package's public names, imported from the module that owns each only when first
asked for, so that ``import loadprobe.load`` loads neither numpy nor the HTTP client::

    __getattr__ = forward(__name__, {"poisson": "schedules", "run": "client"})  # in __init__.py

``MovedModules``: ``import loadprobe.tco`` (a module's place before the package was split by the
steps of the data flow) still works, warning once with the new place.

``load_once``: a faster implementation loadprobe can do without -- the C map kernel of
``loadprobe analyze``, the numba event loop of ``loadprobe simulate`` -- imported once per
process; when it cannot load here (not built, numba missing), None and the reason::

    _COMPILED: dict = {}
    load_once(_COMPILED, "loadprobe.simulator.compiled")   # the module, or None; _COMPILED["error"]
"""

from __future__ import annotations

import importlib
from types import ModuleType


def forward(package: str, owners: dict[str, str]):
    """A module ``__getattr__`` answering each name of ``owners`` from ``package.<its module>``."""

    def __getattr__(name: str):
        owner = owners.get(name)
        if owner is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # import_module, not 'from . import': that would ask this __getattr__ for the module again.
        return getattr(importlib.import_module(f"{package}.{owner}"), name)

    return __getattr__


# Modules that sat directly in loadprobe/ before the package was split by the steps of the data
# flow: ``import loadprobe.tco`` keeps working (with a DeprecationWarning naming the new place).
MOVED = {
    "loadprobe.importer": "loadprobe.record.importer",
    "loadprobe.timestamps": "loadprobe.record.timestamps",
    "loadprobe.dataset": "loadprobe.analysis.dataset",
    "loadprobe.partials": "loadprobe.analysis.partials",
    "loadprobe.engines": "loadprobe.analysis.parallel",
    "loadprobe.analysis.executors": "loadprobe.analysis.parallel",  # "executors" are the user's callables elsewhere
    "loadprobe.route.canary": "loadprobe.route.policy.canary",
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


def load_once(state: dict, module: str, *, errors: tuple[type[BaseException], ...] = (Exception,)) -> ModuleType | None:
    """``module`` imported, or None when importing it raises one of ``errors``; tried once per ``state``.

    ``state`` is the caller's dict: after the first call it holds ``"module"`` and ``"error"`` (the
    reason in one line of at most 300 characters, or None), and emptying it starts afresh.
    """
    if "module" not in state:
        try:
            loaded = importlib.import_module(module)
        except errors as exc:
            state.update(module=None, error=f"{type(exc).__name__}: {exc}"[:300])
        else:
            state.update(module=loaded, error=None)
    return state["module"]
