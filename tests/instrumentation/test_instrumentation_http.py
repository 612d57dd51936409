"""The ASGI and WSGI middlewares, under real HTTP load on real servers (uvicorn, werkzeug)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

import loadprobe
from loadprobe import probe

from ..conftest import by_stage, run_python, stopped_spans
from ..support.http_servers import fetch, fetch_all, serve_asgi, serve_wsgi

fastapi = pytest.importorskip("fastapi")
flask = pytest.importorskip("flask")

from fastapi.responses import StreamingResponse  # noqa: E402

from loadprobe.instrumentation.asgi import LoadprobeMiddleware, instrument_app, uninstrument_app  # noqa: E402
from loadprobe.instrumentation.wsgi import LoadprobeWSGIMiddleware, instrument_flask, uninstrument_flask  # noqa: E402


@probe("lookup")
async def lookup(item_id: int) -> int:
    await asyncio.sleep(0)
    return item_id * 2


@probe("predict")
def predict(n: int) -> int:
    return sum(range(n))


def make_fastapi():
    app = fastapi.FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: int):
        return {"value": await lookup(item_id)}

    @app.post("/predict")
    def run_predict():  # sync: FastAPI runs it in its thread pool
        return {"value": predict(1000)}

    @app.get("/stream")
    def stream():
        def chunks():
            for i in range(3):
                time.sleep(0.02)
                yield f"chunk{i}\n".encode()

        return StreamingResponse(chunks(), media_type="text/plain")

    @app.get("/fail")
    def fail():
        raise fastapi.HTTPException(503, "overloaded")

    @app.get("/boom")
    def boom():
        raise RuntimeError("bug")

    return instrument_app(app)


def requests_of(rows):
    return [r for r in rows if r["parent_id"] is None and r["request_id"] is not None]


def test_every_completed_http_request_has_exactly_one_request_span(recorder):
    n = 300
    paths = [f"/items/{i}" for i in range(n)]
    ids = [f"client-{i}" for i in range(n)]
    with serve_asgi(make_fastapi()) as base:
        statuses = fetch_all(base, paths, ids=ids)
    assert statuses == [200] * n
    rows = stopped_spans(recorder)
    roots = requests_of(rows)
    assert Counter(r["request_id"] for r in roots) == Counter(ids)  # exactly one each
    assert {r["stage"] for r in roots} == {"GET /items/{item_id}"}  # the template, not n raw paths
    assert {r["status"] for r in roots} == {"ok"}
    by_id = {r["span_id"]: r for r in roots}
    lookups = by_stage(rows)["lookup"]
    assert len(lookups) == n
    assert all(by_id[s["parent_id"]]["request_id"] == s["request_id"] for s in lookups)


def test_routes_statuses_streaming_and_thread_pool_handlers(recorder):
    with serve_asgi(make_fastapi()) as base:
        assert fetch(base, "/predict", method="POST")[0] == 200
        status, body = fetch(base, "/stream")
        assert (status, body) == (200, b"chunk0\nchunk1\nchunk2\n")
        assert fetch(base, "/fail")[0] == 503
        assert fetch(base, "/boom")[0] == 500
        assert fetch(base, "/nowhere/42")[0] == 404
    rows = stopped_spans(recorder)
    stages = by_stage(requests_of(rows))
    assert set(stages) == {"POST /predict", "GET /stream", "GET /fail", "GET /boom", "GET (unmatched)"}
    assert stages["GET /fail"][0]["status"] == "error"
    assert stages["GET /boom"][0]["status"] == "error"
    assert stages["GET (unmatched)"][0]["status"] == "ok"
    # the stream is timed to its last chunk: three 20 ms sleeps happen inside the span
    assert stages["GET /stream"][0]["dur_ns"] >= 3 * 20_000_000
    # a sync handler runs in the thread pool and still nests under its request
    (pred,) = by_stage(rows)["predict"]
    assert pred["parent_id"] == stages["POST /predict"][0]["span_id"]
    assert pred["request_id"] == stages["POST /predict"][0]["request_id"]


def test_non_http_scopes_pass_through_and_idle_middleware_records_nothing(recorder):
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})

    with serve_asgi(LoadprobeMiddleware(app, route=lambda scope: "/any")) as base:
        assert fetch(base, "/x") == (200, b"ab")
    assert seen[0] == "lifespan" and "http" in seen
    rows = stopped_spans(recorder)
    assert [(r["stage"], r["status"]) for r in rows] == [("GET /any", "ok")]
    # with no recorder the middleware is a plain pass-through
    with serve_asgi(LoadprobeMiddleware(app)) as base:
        assert fetch(base, "/x") == (200, b"ab")


def test_instrument_app_is_idempotent_and_reversible(recorder):
    app = make_fastapi()
    instrument_app(app)
    with serve_asgi(app) as base:
        fetch(base, "/items/1")
    uninstrument_app(app)
    uninstrument_app(app)
    with serve_asgi(app) as base:
        fetch(base, "/items/2")
    rows = stopped_spans(recorder)
    assert len(requests_of(rows)) == 1


def make_flask():
    app = flask.Flask("probe-test")

    @app.get("/users/<int:user_id>")
    def user(user_id):
        return {"value": predict(user_id)}

    @app.get("/stream")
    def stream():
        def chunks():
            for i in range(3):
                time.sleep(0.02)
                yield f"chunk{i}\n"

        return flask.Response(chunks(), mimetype="text/plain")

    @app.get("/boom")
    def boom():
        raise RuntimeError("bug")

    return app


def test_flask_under_a_real_wsgi_server(recorder):
    app = instrument_flask(instrument_flask(make_flask()))  # twice: still one span per request
    n = 200
    ids = [f"w-{i}" for i in range(n)]
    with serve_wsgi(app) as base:
        assert fetch_all(base, [f"/users/{i}" for i in range(n)], ids=ids) == [200] * n
        assert fetch(base, "/stream") == (200, b"chunk0\nchunk1\nchunk2\n")
        assert fetch(base, "/boom")[0] == 500
        assert fetch(base, "/missing")[0] == 404
    rows = stopped_spans(recorder)
    roots = by_stage(requests_of(rows))
    assert Counter(r["request_id"] for r in roots["GET /users/<int:user_id>"]) == Counter(ids)
    assert roots["GET /stream"][0]["dur_ns"] >= 3 * 20_000_000  # ends when the body closes
    assert roots["GET /boom"][0]["status"] == "error"
    assert roots["GET (unmatched)"][0]["status"] == "ok"
    by_id = {r["span_id"]: r for r in requests_of(rows)}
    preds = by_stage(rows)["predict"]
    assert len(preds) == n and all(by_id[p["parent_id"]]["request_id"] == p["request_id"] for p in preds)


def test_plain_wsgi_app_and_uninstrument_flask(recorder):
    def app(environ, start_response):
        start_response("504 Gateway Timeout", [("Content-Type", "text/plain")])
        return [b"late"]

    with serve_wsgi(LoadprobeWSGIMiddleware(app)) as base:
        assert fetch(base, "/a/b/c") == (504, b"late")
    flask_app = uninstrument_flask(instrument_flask(make_flask()))
    with serve_wsgi(flask_app) as base:
        assert fetch(base, "/users/3")[0] == 200
    rows = stopped_spans(recorder)
    roots = requests_of(rows)
    assert [(r["stage"], r["status"]) for r in roots] == [("GET", "timeout")]  # method only: no raw path


def test_missing_framework_names_the_extra():
    done = run_python("import sys; sys.modules['flask'] = None\n"
                      "from loadprobe.instrumentation.wsgi import instrument_flask\n"
                      "instrument_flask(object())")
    assert "pip install 'loadprobe[wsgi]'" in done.stderr


def test_idle_middlewares_record_nothing(tmp_path):
    app = make_flask()
    instrument_flask(app)
    with serve_wsgi(app) as base:
        assert fetch(base, "/users/2")[0] == 200
    assert loadprobe.current() is None
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_failing_route_callable_still_ends_the_request_span(recorder):
    from loadprobe.record import probe as _probe

    def app(environ, start_response):
        start_response("200 OK", [])
        return [b"ok"]

    with serve_wsgi(LoadprobeWSGIMiddleware(app, route=lambda environ: 1 / 0)) as base:
        assert fetch(base, "/x") == (200, b"ok")
    with serve_asgi(LoadprobeMiddleware(plain_asgi(), route=lambda scope: 1 / 0)) as base:
        assert fetch(base, "/y") == (200, b"ok")
    assert _probe._frame.get() == _probe.ROOT  # no request left open on this thread
    rows = stopped_spans(recorder)
    assert sorted((r["stage"], r["status"]) for r in requests_of(rows)) == [("GET", "ok"), ("GET", "ok")]


def plain_asgi(before=lambda scope: None):
    """A bare ASGI app: its lifespan, then "ok" to every request, after ``before(scope)``."""

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        before(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def test_skipped_paths_are_not_recorded_and_the_app_can_annotate_its_request_span(recorder):
    def annotate(scope):
        span = scope.get("loadprobe.span")
        if span is not None:  # an LLM server knows its request's tokens only as it answers
            span.tokens_in, span.tokens_out = 12, 7

    asgi_app = plain_asgi(annotate)

    def wsgi_app(environ, start_response):
        if "loadprobe.span" in environ:
            environ["loadprobe.span"].tokens_out = 3
        start_response("200 OK", [])
        return [b"ok"]

    with serve_asgi(LoadprobeMiddleware(asgi_app, skip_paths=("/metrics",))) as base:
        assert [fetch(base, path)[0] for path in ("/metrics", "/v1/completions", "/metrics")] == [200] * 3
    with serve_wsgi(LoadprobeWSGIMiddleware(wsgi_app, route=lambda e: e["PATH_INFO"], skip_paths=("/health",))) as base:
        assert [fetch(base, path)[0] for path in ("/health", "/generate")] == [200, 200]
    roots = requests_of(stopped_spans(recorder))
    assert sorted((r["stage"], r["tokens_in"], r["tokens_out"]) for r in roots) == [
        ("GET (unmatched)", 12, 7), ("GET /generate", None, 3)]
