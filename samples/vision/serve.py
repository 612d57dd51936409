"""The industrial-inspection service: POST a JPEG, get the defects found in it.

    python -m loadprobe.samples.vision.serve --port 8000 [--precision int8] [--max-batch 8] [--window-ms 5]
    loadprobe record -o data -- python -m loadprobe.samples.vision.serve --port 8000

    curl --data-binary @plate.jpg http://127.0.0.1:8000/inspect

Per request, as the seeds' inspection lines do: ``decode`` and ``preprocess`` on the CPU
(in the server's thread pool), the ``backbone`` (ONNX Runtime, FP32 or INT8, fixed
160x160 input) through a dynamic batcher, then the ``head`` and ``nms`` whose output
sizes vary with the image, and ``encode`` (the JSON answer). LoadprobeMiddleware records
each HTTP request as the root span (``POST /inspect``); the backbone's batched execution is
recorded once per member request with ``loadprobe.record_span`` (its wait in the batcher as
``queue_ns``), and every other wait between stages -- for a pool thread, for the event loop
to resume the request -- is recorded as the next stage's ``queue_ns``: so nearly all of a
request's time is explained by a stage or a queue.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from time import perf_counter_ns

if __package__ in (None, ""):  # run as a script: resolve the imports below in the installed package
    __package__ = "loadprobe.samples.vision"

import numpy as np
from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from loadprobe import probe, record_span
from loadprobe.instrumentation.asgi import LoadprobeMiddleware
from loadprobe.instrumentation.onnx_cost import model_cost

from .batcher import DynamicBatcher
from .model import INPUT, ensure_models, open_session
from .pipeline import decode, detect, preprocess
from .shapes import SIZE


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
        # The graph's FLOPs and bytes for every batch size the batcher can form, counted once at
        # start: looking them up per batch costs the request path nothing.
        state["costs"] = await run_in_threadpool(_batch_costs, path, max_batch)

        def run_batch(batch: np.ndarray) -> np.ndarray:
            return session.run(None, {INPUT: batch})[0]

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
        x, darkness, prepared_ns = await run_in_threadpool(_prepare, jpeg, perf_counter_ns())
        done = await state["batcher"].submit(x)
        # The batch's cost on one member only, so achieved FLOP/s counts the execution once. Its
        # queue time runs from the end of preprocess: the event loop's resume, then the batcher.
        flops, nbytes = state["costs"][done.size] if done.first else (None, None)
        record_span("backbone", done.start_ns, done.end_ns, batch=done.size, shape=x.shape, engine="cpu",
                    queue_ns=done.start_ns - prepared_ns, flops=flops, bytes=nbytes)
        body = await run_in_threadpool(_finish, done.output, darkness, done.end_ns)
        return Response(body, media_type="application/json")

    app.add_middleware(LoadprobeMiddleware)
    return app


def _batch_costs(path, max_batch: int) -> dict[int, tuple[float, float]]:
    costs = {}
    for n in range(1, max_batch + 1):
        c = model_cost(str(path), {INPUT: (n, 3, SIZE, SIZE)})
        costs[n] = (c.flops, c.bytes)
    return costs


def _prepare(jpeg: bytes, submitted_ns: int):
    """decode and preprocess, on a pool thread; returns their output and when they finished. The
    block form of the decode probe, so that its span also carries the wait for the thread."""
    waited = perf_counter_ns() - submitted_ns
    with probe("decode") as span:
        span.engine, span.bytes, span.queue_ns = "cpu", len(jpeg), waited
        image = decode.__wrapped__(jpeg)  # the unprobed function: this block times it
    x, darkness = preprocess(image)
    return x, darkness, perf_counter_ns()


def _finish(features: np.ndarray, darkness: np.ndarray, since_ns: int) -> bytes:
    """The detection head, NMS and the JSON answer, on a pool thread; the time since ``since_ns``
    (the backbone's end) is the head's queue time."""
    found = detect(features, darkness, queued_ns=perf_counter_ns() - since_ns)
    with probe("encode") as span:
        span.engine = "cpu"
        body = json.dumps({"defects": found, "count": len(found)}).encode()
        span.bytes = len(body)
    return body


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
