"""Framework adapters, installed as ``loadprobe.instrumentation.<framework>``.

Each adapter is an optional extra: importing one whose framework is missing raises an
ImportError naming the ``pip install 'loadprobe[<extra>]'`` that fixes it. Until a
framework adapter exists for your stack, ``loadprobe.probe`` and ``loadprobe.request``
instrument any Python code directly (docs/recording.md).
"""
