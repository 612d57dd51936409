"""The LLM sample over HTTP: an OpenAI-compatible server on the continuous-batching engine.

    python -m loadprobe.samples.llm.serve --port 8001 [--max-running 8] [--kv-tokens 4096]
    loadprobe record -o data -- python samples/llm/serve.py --port 8001
    loadprobe load http://127.0.0.1:8001 --openai --rate 4 --duration 30

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (``stream`` with server-sent
events and ``stream_options.include_usage``, or one JSON answer), ``GET /v1/models``, ``GET /metrics``
(running and waiting requests, KV-cache use, as vLLM names them), ``GET /health``, and the
original ``POST /generate`` (``{"prompt", "max_new_tokens"}``). There is no stop token, so every
request generates exactly ``max_tokens`` (``ignore_eos`` is accepted and changes nothing).

What it records, per HTTP request (``LoadprobeMiddleware`` makes the request span, which gets
the request's ``tokens_in`` and ``tokens_out``): ``tokenize``; ``prefill`` (its ``queue_ns``: the
wait for a running slot and KV-cache room); one ``decode`` per later token, the batched
iteration it was part of (``batch``: sequences decoded together; FLOPs and bytes on one member);
and the markers of its output: ``(first token)`` from the request's start to the prefill's end,
one ``(token)`` per decode step (docs/data-format.md); ``/generate`` adds ``detokenize``. All of it
is recorded on the event loop, in the request's context, from the times the engine thread measured.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import json
import secrets
import time
from time import perf_counter_ns

if __package__ in (None, ""):  # run as a script: resolve the imports below in the installed package
    __package__ = "loadprobe.samples.llm"

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, Field

from loadprobe import record_span
from loadprobe.instrumentation.asgi import LoadprobeMiddleware
from loadprobe.schema import FIRST_TOKEN, TOKEN

from .batching import Engine
from .engine import MAX_NEW_TOKENS, detokenize, fit_prompt, tokenize
from .model import CONFIG, get_model

MODEL_NAME = "loadprobe-llm-sample"


class GenerateRequest(BaseModel):
    prompt: str
    max_new_tokens: int = Field(16, ge=1, le=MAX_NEW_TOKENS)


class CompletionRequest(BaseModel):
    model: str = MODEL_NAME
    prompt: str | list[int] = ""
    messages: list[dict] | None = None
    max_tokens: int = Field(16, ge=1, le=MAX_NEW_TOKENS)
    stream: bool = False
    stream_options: dict | None = None
    ignore_eos: bool = False


def chat_prompt(messages: list[dict]) -> str:
    """The sample's chat template: each message on its own line, then the assistant's turn."""
    return "".join(f"{m.get('role', 'user')}: {m.get('content', '')}\n" for m in messages) + "assistant:"


class Generation:
    """One request's way through the engine, recorded as it streams: its spans, its tokens, its text."""

    def __init__(self, engine: Engine, prompt: list[int], max_tokens: int, request_span) -> None:
        self.loop = asyncio.get_running_loop()
        self.events: asyncio.Queue = asyncio.Queue()
        self.prompt, self.span = prompt, request_span
        self.start_ns = getattr(request_span, "start_ns", None) or perf_counter_ns()
        self.last_ns = None
        self.tokens: list[int] = []
        self.text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.seq = engine.submit(prompt, max_tokens, self._from_engine)
        self.engine = engine

    def _from_engine(self, event) -> None:  # the engine thread: hand over, nothing else
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    async def pieces(self):
        """Each generated token's text ("" while a character's bytes are incomplete), recording as it goes."""
        try:
            while True:
                event = await self.events.get()
                kind = event[0]
                if kind == "done":
                    break
                if kind == "error":
                    raise RuntimeError(event[1])
                self._record(event)
                self.tokens.append(event[-1])
                yield self.text.decode(bytes([event[-1]]) if event[-1] < 256 else b"")
        finally:
            self.engine.abort(self.seq)  # the client went away, or an error: the engine stops for it
            if self.span is not None:
                self.span.tokens_in, self.span.tokens_out = len(self.prompt), len(self.tokens)

    def _record(self, event) -> None:
        kind, t0, t1 = event[0], event[1], event[2]
        if kind == "prefill":
            record_span("prefill", t0, t1, batch=1, shape=(len(self.prompt),), engine="cpu", flops=event[4],
                        bytes=event[5], queue_ns=event[3])
            record_span(FIRST_TOKEN, self.start_ns, t1)
        else:
            record_span("decode", t0, t1, batch=event[3], shape=(event[3],), engine="cpu", flops=event[4],
                        bytes=event[5])
            record_span(TOKEN, self.last_ns, t1)
        self.last_ns = t1


def create_app(*, max_running: int = 8, kv_tokens: int = 4096) -> FastAPI:
    """The service as an ASGI app, its engine running ``max_running`` sequences in ``kv_tokens`` of KV cache."""
    engine = Engine(max_running=max_running, kv_tokens=kv_tokens)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await asyncio.to_thread(get_model)  # build the weights before the first request, off the loop
        engine.start()
        yield
        engine.stop()

    app = FastAPI(title="loadprobe LLM sample", lifespan=lifespan)

    @app.get("/health")
    async def health():
        return {"ok": True, "max_running": max_running, "kv_tokens": kv_tokens}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "loadprobe",
                                            "max_model_len": CONFIG.max_context}]}

    @app.get("/metrics")
    async def metrics():
        lines = []
        for name, kind, value in (("num_requests_running", "gauge", len(engine.running)),
                                  ("num_requests_waiting", "gauge", len(engine.waiting)),
                                  ("kv_cache_usage_perc", "gauge", engine.kv_usage)):
            lines += [f"# TYPE loadprobe_llm:{name} {kind}", f'loadprobe_llm:{name}{{model_name="{MODEL_NAME}"}} {value}']
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        return await _answer(body, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: CompletionRequest, request: Request):
        return await _answer(body, request, chat=True)

    async def _answer(body: CompletionRequest, request: Request, chat: bool):
        if body.model != MODEL_NAME:
            return _error(404, f"The model `{body.model}` does not exist; this server serves {MODEL_NAME}")
        if chat and not body.messages:
            return _error(400, "messages: expected at least one message")
        if isinstance(body.prompt, list) and not chat:
            prompt = [int(t) for t in body.prompt]
            if any(not 0 <= t < CONFIG.vocab for t in prompt):
                return _error(400, f"prompt: token ids are 0 to {CONFIG.vocab - 1}")
        else:
            text = chat_prompt(body.messages) if chat else body.prompt
            prompt = tokenize(text[-CONFIG.max_context:])  # every character is at least one token
        prompt = fit_prompt(prompt, body.max_tokens)
        try:
            generation = Generation(engine, prompt, body.max_tokens, request.scope.get("loadprobe.span"))
        except ValueError as exc:
            return _error(400, str(exc))
        if body.stream:
            usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(_events(generation, chat, usage), media_type="text/event-stream")
        text = "".join([piece async for piece in generation.pieces()])
        return _completion(chat, text, _usage(generation))

    @app.post("/generate")
    async def generate_text(body: GenerateRequest, request: Request):
        prompt = fit_prompt(tokenize(body.prompt[-CONFIG.max_context:]), body.max_new_tokens)
        generation = Generation(engine, prompt, body.max_new_tokens, request.scope.get("loadprobe.span"))
        [_ async for _ in generation.pieces()]
        return {"text": detokenize(generation.tokens), "tokens": len(generation.tokens), "prompt_tokens": len(prompt)}

    # Scrapes of /metrics and health checks are not the service's traffic: they are not recorded.
    app.add_middleware(LoadprobeMiddleware, skip_paths=("/metrics", "/health"))
    return app


async def _events(generation: Generation, chat: bool, usage: bool):
    """The answer as server-sent events: a chat's role first, one event per token, the usage, [DONE]."""
    ident, created = f"cmpl-{secrets.token_hex(8)}", int(time.time())
    head = {"id": ident, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
            "model": MODEL_NAME}
    if chat:
        yield _sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    count = 0
    async for piece in generation.pieces():
        count += 1
        finish = "length" if count == generation.seq.max_tokens else None
        choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
        yield _sse({**head, "choices": [{**choice, "finish_reason": finish}]})
    if usage:
        yield _sse({**head, "choices": [], "usage": _usage(generation)})
    yield "data: [DONE]\n\n"


def _sse(data: dict) -> str:
    return "data: " + json.dumps(data, separators=(",", ":")) + "\n\n"


def _usage(generation: Generation) -> dict:
    n_in, n_out = len(generation.prompt), len(generation.tokens)
    return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}


def _completion(chat: bool, text: str, usage: dict) -> dict:
    choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"} if chat
              else {"index": 0, "text": text, "finish_reason": "length"})
    return {"id": f"cmpl-{secrets.token_hex(8)}", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": MODEL_NAME, "choices": [choice], "usage": usage}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                        status_code=status)


app = create_app()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Serve the loadprobe LLM sample (OpenAI-compatible) over HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--max-running", type=int, default=8, help="sequences decoded together, at most")
    parser.add_argument("--kv-tokens", type=int, default=4096,
                        help="KV-cache budget in tokens: each running request reserves its prompt + max_tokens")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(create_app(max_running=args.max_running, kv_tokens=args.kv_tokens), host=args.host, port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
