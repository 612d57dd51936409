"""numba's disk cache for the compiled loop, made stale by a change to any of the loop's modules.

numba keys each cached function on its own source file only ("changes in other files are not
detected", its caching notes say), yet the loop's functions call each other across this
package's modules and read its constants, which numba freezes into the machine code: after an
edit of ``rules.py``, ``loop.py``'s cached code would still hold the old rules, and the parity
test would check stale code. So every function of the package is cached under a stamp of all
its sources together: any edit recompiles the lot (about 10 s, once), nothing else changes.

Usage (``compiled/__init__.py`` does this before any compiled function is defined)::

    from .cache import stamp_with_package_sources
    stamp_with_package_sources()
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["package_digest", "stamp_with_package_sources"]

HERE = Path(__file__).resolve().parent


def package_digest(folder: Path = HERE) -> str:
    """SHA-256 of every module of the package in ``folder`` (this one), names and contents, in name order."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def stamp_with_package_sources() -> bool:
    """Have numba stamp this package's cached functions with ``package_digest()``; whether it could.

    numba chooses a cache locator per function from a list of classes; one is put first that
    answers for this package's files only, delegates where the cache lives to the locator numba
    would have chosen, and adds the digest to its freshness stamp. A numba that lays its
    caching out differently is left as it is (then, after editing one module, clear the cache:
    ``rm -r loadprobe/simulator/compiled/__pycache__`` or ``$NUMBA_CACHE_DIR``).
    """
    try:
        from numba.core import caching
    except ImportError:
        return False
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    base = getattr(caching, "_CacheLocator", None)
    classes = getattr(impl, "_locator_classes", None)
    if base is None or not isinstance(classes, list):
        return False
    if any(getattr(cls, "loadprobe_package", None) == str(HERE) for cls in classes):
        return True  # already in place (the package was imported again, e.g. after a reload)
    digest = package_digest()

    class PackageStampedLocator(base):
        """Where and how numba would cache the function, with this package's digest in its stamp."""

        loadprobe_package = str(HERE)

        def __init__(self, inner) -> None:
            self._inner = inner

        def __getattr__(self, name):  # anything else numba reads (e.g. _py_file for a warning)
            if name == "_inner":
                raise AttributeError(name)
            return getattr(self._inner, name)

        def ensure_cache_path(self):
            return self._inner.ensure_cache_path()

        def get_cache_path(self):
            return self._inner.get_cache_path()

        def get_source_stamp(self):
            return self._inner.get_source_stamp(), digest

        def get_disambiguator(self):
            return self._inner.get_disambiguator()

        @classmethod
        def from_function(cls, py_func, py_file):
            if Path(py_file).resolve().parent != HERE:
                return None
            for other in classes:
                if other is not cls:
                    inner = other.from_function(py_func, py_file)
                    if inner is not None:
                        return cls(inner)
            return None

    classes.insert(0, PackageStampedLocator)
    return True
