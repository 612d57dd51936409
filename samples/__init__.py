"""Runnable, instrumented sample services, installed as ``loadprobe.samples``.

- ``vision``: industrial inspection over HTTP (JPEG decode, ONNX Runtime backbone through a
  dynamic batcher, a shape-dynamic detection head and NMS); ``loadprobe demo`` runs it.
- ``llm``: a small numpy transformer whose prefill and decode are separate stages.
- ``quickstart.py``: three probed stages driven by a real arrival trace, no server.
- ``data/``: small recordings made by running them, for tests and docs.
"""
