"""The one compiled part of loadprobe: the map step's C kernel (loadprobe/analysis/_mapkernel.c).

Optional: without a C compiler the build skips it and `loadprobe analyze` uses its numpy
path (the same results, several times slower). -ffp-contract=off: its float sums must round
as numpy's do, never fusing a multiply and an add. Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("loadprobe.analysis._cmapkernel", ["loadprobe/analysis/_mapkernel.c"], optional=True,
                             extra_compile_args=["-O3", "-ffp-contract=off"])])
