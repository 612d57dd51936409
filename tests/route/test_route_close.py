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


def run_script(body: str) -> subprocess.CompletedProcess:
    """Run ``body`` (after the plan and imports) in a fresh interpreter; it must end by itself."""
    script = textwrap.dedent('''
        import asyncio, threading, time
        from loadprobe import pipeline
        from loadprobe.route import Rejected, Router
        PLAN = {plan!r}
    ''').format(plan=PLAN) + textwrap.dedent(body)
    # generous: the script itself takes well under a second; a hang is what this catches
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def check_clean_exit(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Event loop is closed" not in done.stderr, done.stderr
    assert "Exception in thread" not in done.stderr and "was destroyed but it is pending" not in done.stderr


HUNG_CALL_AT_CLOSE = {
    "sleep": "time.sleep(3600)",
    "event": "threading.Event().wait()",
}


@pytest.mark.parametrize("hang", sorted(HUNG_CALL_AT_CLOSE))
def test_the_process_exits_after_close_with_a_hung_executor_call_counted_and_reported(hang):
    done = run_script(f'''
        def backbone(x):
            {HUNG_CALL_AT_CLOSE[hang]}

        router = Router(pipeline.loads(PLAN), {{"backbone": {{"gpu0": backbone}}}})

        async def main():
            async with router:
                try:
                    await router.submit("jpeg")
                except TimeoutError as exc:
                    print("request:", exc)

        asyncio.run(main())
        m = router.metrics()
        print("abandoned:", m["abandoned_at_close"], m["engines"]["gpu0"]["abandoned_at_close"])
    ''')
    check_clean_exit(done)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("request: stage 'backbone' on engine 'gpu0' did not finish within its 50 ms timeout")
    assert lines[1] == "abandoned: 1 {'backbone': 1}"
    # one warning, naming the stage, the engine and the count
    assert done.stderr.count("still running on its worker threads") == 1, done.stderr
    assert "1 executor call(s)" in done.stderr and "stage 'backbone' on engine 'gpu0': 1" in done.stderr


def test_a_thread_router_with_a_hung_call_closes_and_the_process_exits():
    done = run_script('''
        router = Router(pipeline.loads(PLAN), {"backbone": {"gpu0": lambda x: threading.Event().wait()}})
        with router:
            try:
                router.submit_sync("jpeg")
            except TimeoutError as exc:
                print("request:", exc)
        print("abandoned:", router.metrics()["abandoned_at_close"])
    ''')
    check_clean_exit(done)
    assert done.stdout.splitlines()[1] == "abandoned: 1"
    assert "stage 'backbone' on engine 'gpu0': 1" in done.stderr


@pytest.mark.parametrize("timeout_ms, ended", [
    (50, "request: stage 'backbone' on engine 'gpu0' did not finish within its 50 ms timeout (it was running)"),
    (600000, "request: rejected (closed) at stage 'backbone' on engine 'gpu0': the router closed while it ran"),
], ids=["timed-out-before-close", "running-at-close"])
def test_a_result_that_comes_after_close_is_dropped_and_counted_without_a_traceback(timeout_ms, ended):
    """The call outlives the router and its event loop, then returns: nothing is handed to the closed loop."""
    done = run_script(f'''
        started, release = threading.Event(), threading.Event()

        def backbone(x):
            started.set()
            release.wait()
            return x

        router = Router(pipeline.loads(PLAN.replace("timeout_ms: 50", "timeout_ms: {timeout_ms}")),
                        {{"backbone": {{"gpu0": backbone}}}})

        async def main():
            async with router:
                request = asyncio.create_task(router.submit("jpeg"))
                while not (started.is_set() and ({timeout_ms} > 60000 or request.done())):
                    await asyncio.sleep(0.001)
            try:
                await request
            except (TimeoutError, Rejected) as exc:
                print("request:", exc)

        asyncio.run(main())            # the loop is closed now
        release.set()                  # the worker returns
        while router.metrics()["late_results"] == 0:
            time.sleep(0.001)
        m = router.metrics()
        print("late:", m["late_results"], m["engines"]["gpu0"]["late_results"], "abandoned:", m["abandoned_at_close"])
    ''')
    check_clean_exit(done)
    lines = done.stdout.splitlines()
    assert lines == [ended, "late: 1 1 abandoned: 1"]


def test_submit_sync_callers_get_closed_when_the_router_closes_under_them():
    """A caller blocked in submit_sync() on a running call is answered at close, not left waiting."""
    started, release = threading.Event(), threading.Event()

    def backbone(x):
        started.set()
        release.wait()
        return x

    r = Router(pipeline.loads(PLAN.replace("timeout_ms: 50", "timeout_ms: 600000")),
               {"backbone": {"gpu0": backbone}})
    outcome: list = []

    def client():
        try:
            outcome.append(r.submit_sync("jpeg"))
        except Rejected as exc:
            outcome.append(exc)

    try:
        with r:
            caller = threading.Thread(target=client)
            caller.start()
            assert started.wait(60)
        caller.join(60)
        assert not caller.is_alive()
    finally:
        release.set()
    assert isinstance(outcome[0], Rejected) and outcome[0].reason == "closed"
    assert "the router closed while it ran" in str(outcome[0])
    assert r.metrics()["requests"]["rejected"] == 1 and r.metrics()["abandoned_at_close"] == 1


def test_a_thread_router_closing_under_an_inline_async_call_cancels_it_and_answers_its_caller():
    cancelled = threading.Event()
    started = threading.Event()

    async def head(x):
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    r = Router(pipeline.loads(PLAN.replace("timeout_ms: 50", "timeout_ms: 600000")), {"backbone": {"gpu0": head}})
    outcome: list = []

    def client():
        try:
            outcome.append(r.submit_sync("jpeg"))
        except Rejected as exc:
            outcome.append(exc)

    with r:
        caller = threading.Thread(target=client)
        caller.start()
        assert started.wait(60)
    caller.join(60)
    assert cancelled.is_set() and not caller.is_alive()
    assert isinstance(outcome[0], Rejected) and outcome[0].reason == "closed"
    assert str(outcome[0]) == "rejected (closed) at stage 'backbone' on engine 'gpu0': the router closed while it ran"
    counts = r.metrics()["requests"]
    assert counts["rejected"] == 1 and counts["failed"] == 0 and counts["in_flight"] == 0


def test_the_docs_closing_example_runs_and_prints_what_the_page_says():
    import re

    from ..conftest import REPO

    section = (REPO / "docs" / "route.md").read_text(encoding="utf-8").split("## Timeouts, errors and closing", 1)[1]
    section = section.split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    printed = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    logged = " ".join(re.search(r"and logs, once: `(.*?)`", section, re.S).group(1).split())
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    check_clean_exit(done)
    assert done.stdout == printed
    assert done.stderr.strip() == logged
