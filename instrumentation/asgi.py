"""One request span per HTTP request of any ASGI app (Starlette, FastAPI, Quart, ...).

Usage::

    from fastapi import FastAPI
    from loadprobe.instrumentation.asgi import LoadprobeMiddleware

    app = FastAPI()
    app.add_middleware(LoadprobeMiddleware)       # or: instrument_app(app)

    # any ASGI app: app = LoadprobeMiddleware(app)

The span is the root of the request: probes that run while the app handles it -- in the
handler's task, in tasks it starts, in Starlette's thread pool -- attach to it. It starts
when the request reaches the middleware and ends when the last body message has been
handed to the server, so a streaming response is timed to its end and background tasks
that run after it are not. Its stage is ``"<METHOD> <route template>"`` (``"GET
/items/{item_id}"``, never the raw path: a stage per URL would be unbounded), its request
id the ``x-request-id`` header when the client sent one, and its status comes from the
response code: 5xx is ``error``, 408 and 504 are ``timeout``. Websocket scopes pass
through untouched.

At the app's lifespan shutdown the middleware ends a run that ``LOADPROBE_DIR`` started
(flushes one the program started itself), before the server exits: uvicorn, alone, with
``--workers`` or as gunicorn's worker, re-raises the SIGTERM it shut down for, which kills
the process before ``atexit`` could write the last flush interval.

Target versions: the ASGI 3 interface; route templates from Starlette >= 0.27 (FastAPI
included). Nothing here imports Starlette: the middleware works on bare ASGI apps too.
"""

from __future__ import annotations

from ..record.probe import Span, recording

TARGET_VERSIONS = ("asgi >= 3.0", "starlette >= 0.27")

__all__ = ["TARGET_VERSIONS", "LoadprobeMiddleware", "instrument_app", "uninstrument_app"]


def http_status(code: int | None) -> str:
    """Span status for an HTTP response code (None: no response was sent)."""
    if code is None:
        return "cancelled"
    if code in (408, 504):
        return "timeout"
    return "error" if code >= 500 else "ok"


class LoadprobeMiddleware:
    """ASGI middleware recording each HTTP request as a loadprobe request span.

    The open span is ``scope["loadprobe.span"]`` (a Starlette/FastAPI handler: ``request.scope``), so
    that the app can set what only it knows, such as an LLM request's ``tokens_in`` and ``tokens_out``.

    ``request_id_header`` names the header carrying the caller's request id (lower case);
    ``route`` is an optional ``callable(scope) -> str`` for apps whose router does not set
    ``scope["route"]`` -- it must return a template, not the raw path. ``skip_paths``: paths
    that are not the service's traffic and are not recorded, such as the ``/metrics`` page a
    scraper reads every second (``skip_paths=("/metrics", "/health")``).
    """

    def __init__(self, app, *, request_id_header: str = "x-request-id", route=None, skip_paths=()) -> None:
        self.app = app
        self._header = request_id_header.lower().encode("latin-1")
        self._route = route
        self._skip = frozenset(skip_paths)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, _finish_recording_at_shutdown(send))
        if scope["type"] != "http" or not recording() or scope.get("path") in self._skip:
            return await self.app(scope, receive, send)
        request_id = None
        for name, value in scope.get("headers") or ():
            if name == self._header:
                request_id = value.decode("latin-1")
                break
        span = Span("http", request_id=request_id, is_request=True).open()
        scope["loadprobe.span"] = span  # for the app: an LLM server sets span.tokens_in / tokens_out on it
        code = None
        done = False

        def finish(exc: BaseException | None) -> None:
            nonlocal done
            if done:
                return
            done = True
            try:
                span.stage = f"{scope.get('method', 'HTTP')} {self._template(scope)}"
            except Exception:  # a failing route callable still ends the span, under the method alone
                span.stage = str(scope.get("method", "HTTP"))
            try:
                if exc is None:
                    span.status = http_status(code)
                elif code is not None and isinstance(exc, OSError):
                    span.status = "cancelled"  # the client went away mid-response
            finally:
                span.close(exc)

        async def send_and_time(message):
            nonlocal code
            kind = message["type"]
            if kind == "http.response.start":
                code = message.get("status")
            await send(message)
            if (kind == "http.response.body" and not message.get("more_body", False)) or (
                kind == "http.response.pathsend"
            ):
                finish(None)

        try:
            await self.app(scope, receive, send_and_time)
        except BaseException as exc:
            finish(exc)
            raise
        finish(None)  # the app returned without completing a response (client gone, ...)

    def _template(self, scope) -> str:
        if self._route is not None:
            return str(self._route(scope))
        route = scope.get("route")
        path = getattr(route, "path", None) or getattr(route, "path_format", None)
        return path if path else "(unmatched)"


def _finish_recording_at_shutdown(send):
    """``send`` for a lifespan scope: the recording is finished before the server hears that the
    app has shut down (after which it may exit at once)."""

    async def lifespan_send(message):
        if message.get("type") in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            try:
                from ..record.recorder import stop_if_started_from_env

                stop_if_started_from_env()  # a few ms of the loop at shutdown; no request is left
            except Exception:  # the app's shutdown must go on whatever happens here
                pass
        await send(message)

    return lifespan_send


def instrument_app(app, **options):
    """Add :class:`LoadprobeMiddleware` to a Starlette/FastAPI app once; returns the app.

    Call it before the app serves its first request (Starlette builds its middleware
    stack then). Calling it again does nothing.
    """
    if any(m.cls is LoadprobeMiddleware for m in app.user_middleware):
        return app
    app.add_middleware(LoadprobeMiddleware, **options)
    return app


def uninstrument_app(app):
    """Remove the middleware :func:`instrument_app` added (a no-op if there is none)."""
    kept = [m for m in app.user_middleware if m.cls is not LoadprobeMiddleware]
    if len(kept) != len(app.user_middleware):
        app.user_middleware[:] = kept
        app.middleware_stack = None  # rebuilt on the next request, without us
    return app
