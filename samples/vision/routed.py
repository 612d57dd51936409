"""The inspection service through ``loadprobe.route``: each stage on the engine pipeline.yaml names.

    python -m loadprobe.samples.vision.routed --port 8000 [--pipeline samples/vision/pipeline.yaml]
    curl --data-binary @plate.jpg http://127.0.0.1:8000/inspect          # x-precision: fp16 skips INT8

The Router runs ``decode`` and ``preprocess`` on the "cpu" engine's worker threads, the
``backbone`` in batches on "npu0" (the INT8 model), falling back to "gpu0" (the FP32 model)
for at most 30% of requests when the NPU queue backs up -- and for every request that
requires fp16 or better -- and ``postprocess`` (head and NMS, dynamic shapes) on "gpu0".
A full queue answers 503 with the router's retry hint. ``GET /metrics`` is ``router.metrics()``.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

if __package__ in (None, ""):  # run as a script: resolve the imports below in the installed package
    __package__ = "loadprobe.samples.vision"

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from loadprobe.instrumentation.asgi import LoadprobeMiddleware
from loadprobe.route import Rejected, Router

from .model import INPUT, ensure_models, open_session
from .pipeline import decode, detect, preprocess

PIPELINE = Path(__file__).with_name("pipeline.yaml")


def executors(fp32_session, int8_session) -> dict:
    """The callables that make pipeline.yaml's engines real (the router records the stage spans)."""

    def backbone_on(session):
        def run(batch: list) -> list:  # batched stage: a list of (x, darkness) in, one result each out
            features = session.run(None, {INPUT: np.stack([x for x, _ in batch])})[0]
            return [(features[i], darkness) for i, (_, darkness) in enumerate(batch)]
        return run

    return {
        "decode": {"cpu": decode.__wrapped__},  # the unprobed function: the router times the stage
        "preprocess": {"cpu": preprocess.__wrapped__},
        "backbone": {"npu0": backbone_on(int8_session), "gpu0": backbone_on(fp32_session)},
        "postprocess": {"gpu0": lambda item: detect(*item)},
    }


def create_app(pipeline=PIPELINE, *, model_dir=None) -> FastAPI:
    """The routed service as an ASGI app; models are built (once, cached) when it starts."""
    state: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        fp32, int8 = ensure_models(model_dir)
        router = Router.load(pipeline, executors(open_session(fp32), open_session(int8)))
        async with router:
            state["router"] = router
            yield

    app = FastAPI(title="loadprobe vision sample, routed", lifespan=lifespan)

    @app.post("/inspect")
    async def inspect(request: Request):
        jpeg = await request.body()
        precision = request.headers.get("x-precision")
        try:
            found = await state["router"].submit(jpeg, priority=int(request.headers.get("x-priority", 0)),
                                                 precision=precision)
        except Rejected as exc:
            return JSONResponse({"rejected": exc.reason, "retry_after_ms": exc.retry_after_ms}, status_code=503)
        return {"defects": found, "count": len(found)}

    @app.get("/metrics")
    async def metrics():
        return state["router"].metrics()

    app.add_middleware(LoadprobeMiddleware)
    return app


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Serve the vision sample through loadprobe.route.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--pipeline", default=str(PIPELINE), help="the pipeline.yaml to run")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(create_app(args.pipeline), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
