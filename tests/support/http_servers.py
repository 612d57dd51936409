"""Real HTTP servers on 127.0.0.1 for tests, and a small concurrent client.

Usage::

    with serve_asgi(app) as base:            # uvicorn, in a thread
        codes = fetch_all(base, ["/items/1", "/items/2"])
    with serve_wsgi(app) as base:            # werkzeug's threaded server
        ...
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit


@contextlib.contextmanager
def serve_asgi(app):
    """Serve an ASGI app with uvicorn on an ephemeral port; yields the base URL."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


@contextlib.contextmanager
def serve_wsgi(app):
    """Serve a WSGI app with werkzeug's threaded server on an ephemeral port."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    # Request threads are joined on close: werkzeug's are daemons, so a handler still closing its
    # response (which ends the request's span) could record into the next test's recorder.
    server.daemon_threads = False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()  # joins the request threads (ThreadingMixIn.block_on_close)
        thread.join(20)


def fetch(base: str, path: str, *, method: str = "GET", headers: dict | None = None,
          body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body)."""
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def fetch_all(base: str, paths: list[str], *, workers: int = 16, ids: list[str] | None = None) -> list[int]:
    """Send every path concurrently (with ``x-request-id: ids[i]`` when given); their statuses."""

    def one(i: int) -> int:
        headers = {"x-request-id": ids[i]} if ids else {}
        return fetch(base, paths[i], headers=headers)[0]

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(len(paths))))
