"""Analysis: recorded files in, a Portrait out (``loadprobe.analysis.analyze(["data/"])``).

The data flow, one module per step: ``dataset`` finds and describes the files; ``map_step``
turns each file into an order-free partial (``partials``): ``reading`` reads it (``footers``
saying what need not be read), ``columns`` decodes it into numpy arrays, and a kernel
aggregates them (``kernel_c`` through ``ckernel`` in C, or ``kernel_numpy``; ``kernels``
chooses, once per analysis); ``parallel`` runs the map step in threads, processes or on Dask;
``finalize`` turns the merged partial into a Portrait with ``traffic``, ``timeline``,
``bottlenecks`` and ``roofline``. ``histogram`` is the HDR layout every latency figure is kept
in, ``memory`` how the map step reuses its arrays.
"""


def __getattr__(name: str):
    # analyze() loads numpy and pyarrow: only when asked for, never at import.
    if name == "analyze":
        from .run import analyze

        return analyze
    raise AttributeError(f"module 'loadprobe.analysis' has no attribute {name!r}")
