"""One request span per HTTP request of any WSGI app (Flask, Django, Falcon, ...).

Usage::

    from flask import Flask
    from loadprobe.instrumentation.wsgi import instrument_flask

    app = Flask(__name__)
    instrument_flask(app)                 # route templates as stage names

    # any WSGI app: application = LoadprobeWSGIMiddleware(application, route=...)

The span is the root of the request: probes the handler calls attach to it. It ends when
the server closes the response iterable (PEP 3333), so a streamed body is timed to its
last chunk. Its stage is ``"<METHOD> <route template>"``: Flask's URL rule under
:func:`instrument_flask`, else what the ``route`` callable returns for the environ, else
the method alone (never the raw path: a stage per URL would be unbounded). The request
id is the ``X-Request-Id`` header when sent; the status follows the response code
(5xx ``error``, 408/504 ``timeout``).

Target versions: PEP 3333 WSGI; Flask >= 2.3 for :func:`instrument_flask`.
"""

from __future__ import annotations

from ..record.probe import Span, recording
from ._deps import require
from .asgi import http_status

TARGET_VERSIONS = ("wsgi (PEP 3333)", "flask >= 2.3")
ROUTE_KEY = "loadprobe.route"
"""environ key where a framework hook leaves the matched route template."""

__all__ = ["ROUTE_KEY", "TARGET_VERSIONS", "LoadprobeWSGIMiddleware", "instrument_flask", "uninstrument_flask"]


class LoadprobeWSGIMiddleware:
    """WSGI middleware recording each request as a loadprobe request span.

    ``route`` is an optional ``callable(environ) -> str`` returning the route template;
    ``request_id_header`` names the request id header; ``skip_paths``, paths not recorded (a
    scraped ``/metrics``), as in the ASGI middleware. The open span is ``environ["loadprobe.span"]``.
    """

    def __init__(self, app, *, route=None, request_id_header: str = "x-request-id", skip_paths=()) -> None:
        self.app = app
        self._route = route
        self._key = "HTTP_" + request_id_header.upper().replace("-", "_")
        self._skip = frozenset(skip_paths)

    def __call__(self, environ, start_response):
        if not recording() or environ.get("PATH_INFO") in self._skip:
            return self.app(environ, start_response)
        span = environ["loadprobe.span"] = Span("http", request_id=environ.get(self._key), is_request=True).open()
        response = _Response(self, environ, span)

        def start_and_note(status, headers, exc_info=None):
            try:
                response.code = int(str(status)[:3])
            except ValueError:
                pass
            return start_response(status, headers, exc_info)

        try:
            body = self.app(environ, start_and_note)
        except BaseException as exc:
            response.finish(exc)
            raise
        response.body = body
        return response

    def stage_of(self, environ) -> str:
        template = environ.get(ROUTE_KEY)
        if template is None and self._route is not None:
            template = self._route(environ)
        method = environ.get("REQUEST_METHOD", "HTTP")
        return f"{method} {template}" if template else method


class _Response:
    """The app's response iterable, closing the request span when the server closes it."""

    def __init__(self, middleware: LoadprobeWSGIMiddleware, environ, span: Span) -> None:
        self._middleware, self._environ, self._span = middleware, environ, span
        self.code = None
        self.body = ()
        self._done = False

    def __iter__(self):
        try:
            yield from self.body
        except BaseException as exc:
            self.finish(exc)
            raise

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.finish(None)

    def finish(self, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._span.stage = self._middleware.stage_of(self._environ)
        except Exception:  # a failing route callable still ends the span, under the method alone
            self._span.stage = str(self._environ.get("REQUEST_METHOD", "HTTP"))
        if exc is None:
            self._span.status = http_status(self.code)
        self._span.close(exc)  # never raises: Span.close only appends to the thread's buffer


def instrument_flask(app, **options):
    """Wrap a Flask app's WSGI entry point once, naming stages by URL rule; returns the app."""
    if getattr(app, "_loadprobe_wsgi", None) is not None:
        return app
    request = require("flask", extra="wsgi").request

    def note_route():
        rule = request.url_rule
        request.environ[ROUTE_KEY] = rule.rule if rule is not None else "(unmatched)"

    app._loadprobe_wsgi = (app.wsgi_app, note_route)
    app.before_request(note_route)
    app.wsgi_app = LoadprobeWSGIMiddleware(app.wsgi_app, **options)
    return app


def uninstrument_flask(app):
    """Undo :func:`instrument_flask` (a no-op if it was not applied)."""
    saved = getattr(app, "_loadprobe_wsgi", None)
    if saved is None:
        return app
    app.wsgi_app, note_route = saved
    funcs = app.before_request_funcs.get(None, [])
    if note_route in funcs:
        funcs.remove(note_route)
    app._loadprobe_wsgi = None
    return app
