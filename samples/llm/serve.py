"""The LLM sample over HTTP: POST a prompt, get greedy tokens from the numpy transformer.

    python -m loadprobe.samples.llm.serve --port 8001 [--threads 2]
    loadprobe record -o data -- python samples/llm/serve.py --port 8001

    curl -d '{"prompt": "Hello", "max_new_tokens": 32}' http://127.0.0.1:8001/generate
    -> {"text": "...", "tokens": 32, "prompt_tokens": 6}

LoadprobeMiddleware records each HTTP request as the root span (``POST /generate``);
``tokenize`` and ``detokenize`` run on the event loop (microseconds), ``prefill`` and the
``decode`` steps in a pool of ``--threads`` model workers, so a slow generation never
stalls the loop. A request that waits for a free worker records the wait as the prefill's
``queue_ns``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter_ns

if __package__ in (None, ""):  # run as a script: resolve the imports below in the installed package
    __package__ = "loadprobe.samples.llm"

from fastapi import FastAPI
from pydantic import BaseModel, Field

from loadprobe.instrumentation.asgi import LoadprobeMiddleware

from .engine import MAX_NEW_TOKENS, detokenize, fit_prompt, generate, tokenize
from .model import CONFIG, get_model


class GenerateRequest(BaseModel):
    prompt: str
    max_new_tokens: int = Field(16, ge=1, le=MAX_NEW_TOKENS)


def create_app(*, threads: int = 2) -> FastAPI:
    """The service as an ASGI app, running the model in ``threads`` worker threads."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="llm")

    async def in_pool(fn, *args):
        # A plain executor does not carry context variables: run in a copy of this task's
        # context, so the worker's probes attach to the HTTP request span.
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(pool, ctx.run, fn, *args)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await in_pool(get_model)  # build the weights before the first request, off the loop
        yield

    app = FastAPI(title="loadprobe LLM sample", lifespan=lifespan)

    @app.get("/health")
    async def health():
        return {"ok": True, "threads": threads}

    @app.post("/generate")
    async def generate_text(body: GenerateRequest):
        # Every character is at least one token, so the last max_context characters hold
        # every token that can fit: tokenizing more would only be thrown away.
        prompt = fit_prompt(tokenize(body.prompt[-CONFIG.max_context:]), body.max_new_tokens)
        new = await in_pool(generate, prompt, body.max_new_tokens, perf_counter_ns())
        return {"text": detokenize(new), "tokens": len(new), "prompt_tokens": len(prompt)}

    app.add_middleware(LoadprobeMiddleware)
    return app


app = create_app()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Serve the loadprobe LLM sample over HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--threads", type=int, default=2, help="model worker threads (concurrent generations)")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(create_app(threads=args.threads), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
