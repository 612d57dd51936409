"""Optional backends: a faster implementation of something loadprobe can also do without, loaded once.

The C map kernel of ``loadprobe analyze`` (``analysis/ckernel.py``) and the numba event loop of
``loadprobe simulate`` (``simulator/compiled.py``) may not load here -- not built, numba missing,
a compiler that refuses -- and then the numpy or Python path does the work. Whether a backend
loads is decided once per process and remembered with the reason.

Usage::

    _COMPILED: dict = {}   # "module" once tried (None: it cannot load here), "error": why not (else None)

    def _backend():
        return load_once(_COMPILED, "loadprobe.simulator.compiled")   # the module, or None
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["load_once"]


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
