"""Which kernel aggregates the files' spans, chosen once per analysis: compiled C or numpy.

Two kernels give identical partials (tests/analysis/test_analyze_fast.py): ``kernel_numpy``,
the reference, always available; and ``kernel_compiled``, the C library built from
``_mapkernel.c`` at install when a C compiler is present (``ckernel`` loads it through
ctypes), a few times faster. ``Filters(kernel=...)`` resolves the user's choice here, so every
file of an analysis is aggregated by the same kernel, and no file asks again.

Usage::

    resolve_kernel("auto")    # "compiled" when the C library loads here, else "numpy"
    kernel_available()        # whether it loads; unavailable_reason() says why not
"""

from __future__ import annotations

from .._errors import LoadprobeError
from .._imports import load_once

KERNELS = ("auto", "compiled", "numpy")  # what Filters.kernel, analyze(kernel=) and --kernel take


_CKERNEL: dict = {}  # load_once's record: "module" (None: the C library does not load here), "error"


def _load():
    """(``ckernel``, None) when the C library loads here, else (None, why not); tried once."""
    return load_once(_CKERNEL, f"{__package__}.ckernel", errors=(ImportError, OSError)), _CKERNEL["error"]


def compiled_library():
    """The ``ckernel`` module when the C library loads here, else None."""
    return _load()[0]


def kernel_available() -> bool:
    """Whether the compiled kernel loads here (its C library was built at install)."""
    return compiled_library() is not None


def unavailable_reason() -> str | None:
    """Why the compiled kernel does not load here (None when it does)."""
    return _load()[1]


def resolve_kernel(name: str) -> str:
    """The kernel ``name`` ("auto", "compiled" or "numpy") stands for here: "auto" is the
    compiled one when its library loads, numpy otherwise; "compiled" without it is an error."""
    if name not in KERNELS:
        raise LoadprobeError(f"kernel {name!r} is not one of {', '.join(KERNELS)}")
    if name == "numpy":
        return name
    if not kernel_available():
        if name == "compiled":
            raise LoadprobeError("kernel 'compiled' needs loadprobe's C kernel, built at install when a C compiler "
                                 "is present (reinstall with one); kernel 'auto' uses numpy without it")
        return "numpy"
    return "compiled"
