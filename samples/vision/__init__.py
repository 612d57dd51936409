"""Industrial inspection, the seeds' vision pipeline at 2-core scale.

    python -m loadprobe.samples.vision.serve --port 8000
    loadprobe demo                      # serves it, loads it, records it, analyses it

Modules, in data-flow order: ``images`` (generated JPEG photos), ``pipeline`` (decode,
preprocess, head, nms), ``model`` (the ONNX backbone, FP32 and INT8), ``batcher`` (the
dynamic batcher), ``serve`` (the FastAPI service).
"""
