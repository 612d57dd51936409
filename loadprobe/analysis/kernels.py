"""Which kernel aggregates the files' spans, chosen once per analysis: C or numpy.

Two kernels give identical partials (tests/analysis/test_analyze_fast.py): ``kernel_numpy``,
the reference, always available; and ``kernel_c``, the C library built from
``_mapkernel.c`` at install when a C compiler is present (``ckernel`` loads it through
ctypes), a few times faster. ``Filters(kernel=...)`` resolves the user's choice here, so every
file of an analysis is aggregated by the same kernel, and no file asks again.

Usage::

    resolve_kernel("auto")    # "c" when the C library loads here, else "numpy"
    kernel_available()        # whether it loads; unavailable_reason() says why not
"""

from __future__ import annotations

from .._errors import LoadprobeError
from .._imports import load_once

KERNELS = ("auto", "c", "numpy")  # what Filters.kernel, analyze(kernel=) and --kernel take
OLD_NAMES = {"compiled": "c"}  # still taken, with a DeprecationWarning ("compiled" is the simulator's numba loop)


_CKERNEL: dict = {}  # load_once's record: "module" (None: the C library does not load here), "error"


def _load():
    """(``ckernel``, None) when the C library loads here, else (None, why not); tried once."""
    return load_once(_CKERNEL, f"{__package__}.ckernel", errors=(ImportError, OSError)), _CKERNEL["error"]


def c_library():
    """The ``ckernel`` module when the C library loads here, else None."""
    return _load()[0]


def kernel_available() -> bool:
    """Whether the C kernel loads here (its library was built at install)."""
    return c_library() is not None


def unavailable_reason() -> str | None:
    """Why the C kernel does not load here (None when it does)."""
    return _load()[1]


def resolve_kernel(name: str) -> str:
    """The kernel ``name`` ("auto", "c" or "numpy") stands for here: "auto" is the C one when
    its library loads, numpy otherwise; "c" without it is an error."""
    if name in OLD_NAMES:
        import warnings

        warnings.warn(f"kernel {name!r} is now {OLD_NAMES[name]!r}", DeprecationWarning, stacklevel=3)
        name = OLD_NAMES[name]
    if name not in KERNELS:
        raise LoadprobeError(f"kernel {name!r} is not one of {', '.join(KERNELS)}")
    if name == "numpy":
        return name
    if not kernel_available():
        if name == "c":
            raise LoadprobeError("kernel 'c' needs loadprobe's C kernel, built at install when a C compiler "
                                 "is present (reinstall with one); kernel 'auto' uses numpy without it")
        return "numpy"
    return "c"
