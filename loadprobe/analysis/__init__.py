"""Analysis: recorded files in, a Portrait out (``loadprobe.analysis.analyze(["data/"])``).

The data flow, one module per step: ``dataset`` finds and describes the files, ``partials``
aggregates each file into an order-free partial (``ckernel`` in C, numpy otherwise) on the
map executors of ``executors``, ``finalize`` turns the merged partial into a Portrait with
``traffic``, ``timeline``, ``bottlenecks`` and ``roofline``; ``histogram`` is the HDR layout
every latency figure is kept in.
"""


def __getattr__(name: str):
    # analyze() loads numpy and pyarrow: only when asked for, never at import.
    if name == "analyze":
        from .run import analyze

        return analyze
    raise AttributeError(f"module 'loadprobe.analysis' has no attribute {name!r}")
