"""The industrial-inspection service: POST a JPEG, get the defects found in it.

    python -m loadprobe.samples.vision.serve --port 8000 [--precision int8] [--max-batch 8] [--window-ms 5]
    loadprobe record -o data -- python -m loadprobe.samples.vision.serve --port 8000

    curl --data-binary @plate.jpg http://127.0.0.1:8000/inspect

Per request, as the seeds' inspection lines do: ``decode`` and ``preprocess`` on the CPU
(in the server's thread pool), the ``backbone`` (ONNX Runtime, FP32 or INT8, fixed
160x160 input) through a dynamic batcher, then the ``head`` and ``nms`` whose output
sizes vary with the image. LoadprobeMiddleware records each HTTP request as the root
span (``POST /inspect``); the backbone's batched execution is recorded once per member
request with ``loadprobe.record_span`` (its wait in the batcher as ``queue_ns``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys

if __package__ in (None, ""):  # run as a script: make ``loadprobe.samples`` importable
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    __package__ = "samples.vision"

import numpy as np
from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool

from loadprobe import record_span
from loadprobe.instrumentation.asgi import LoadprobeMiddleware
from loadprobe.instrumentation.onnx_cost import model_cost

from .batcher import DynamicBatcher
from .model import INPUT, SIZE, ensure_models, open_session
from .pipeline import decode, detect, preprocess


def create_app(*, precision: str = "fp32", max_batch: int = 8, window_ms: float = 5.0, threads: int = 1,
               model_dir=None) -> FastAPI:
    """The service as an ASGI app; models are built (once, cached) when it starts."""
    if precision not in ("fp32", "int8"):
        raise ValueError(f"precision must be fp32 or int8, not {precision!r}")
    state: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        fp32, int8 = await run_in_threadpool(ensure_models, model_dir)
        path = int8 if precision == "int8" else fp32
        session = open_session(path, threads)
        state["costs"] = {}  # batch size -> (flops, bytes), from the ONNX graph

        def run_batch(batch: np.ndarray) -> np.ndarray:
            return session.run(None, {INPUT: batch})[0]

        def cost(n: int):
            if n not in state["costs"]:
                c = model_cost(str(path), {INPUT: (n, 3, SIZE, SIZE)})
                state["costs"][n] = (c.flops, c.bytes)
            return state["costs"][n]

        state["cost"] = cost
        batcher = state["batcher"] = DynamicBatcher(run_batch, max_batch=max_batch, window_ms=window_ms)
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="loadprobe vision sample", lifespan=lifespan)

    @app.get("/health")
    async def health():
        return {"ok": True, "precision": precision}

    @app.post("/inspect")
    async def inspect(request: Request):
        jpeg = await request.body()
        x, darkness = await run_in_threadpool(lambda: preprocess(decode(jpeg)))
        done = await state["batcher"].submit(x)
        # the graph's cost is computed once per batch size; off the event loop, like the rest
        flops, nbytes = await run_in_threadpool(state["cost"], done.size) if done.first else (None, None)
        record_span("backbone", done.start_ns, done.end_ns, batch=done.size, shape=x.shape, engine="cpu",
                    queue_ns=done.start_ns - done.enqueued_ns, flops=flops, bytes=nbytes)
        found = await run_in_threadpool(detect, done.output, darkness)
        return {"defects": found, "count": len(found)}

    app.add_middleware(LoadprobeMiddleware)
    return app


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Serve the loadprobe vision sample over HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--window-ms", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    args = parser.parse_args(argv)
    import uvicorn

    app = create_app(precision=args.precision, max_batch=args.max_batch, window_ms=args.window_ms,
                     threads=args.threads)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
