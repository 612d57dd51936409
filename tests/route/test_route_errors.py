"""What the router's errors say: every timeout names its stage, engine and limit; an executor's
exception with no message gets one naming its type, stage and engine. Real routers, real
threads and tasks; the assertions are about the messages, never about how long anything took."""

from __future__ import annotations

import asyncio
import threading

import pytest

from loadprobe import pipeline
from loadprobe.route import Rejected, Router

TIMEOUT = "within its 40 ms timeout"


def plan(stage: str, engine: str = "gpu0: {kind: gpu, max_concurrency: 2, max_queue: 16}") -> pipeline.PipelineConfig:
    return pipeline.loads(f"version: 1\nservice: t\nengines:\n  {engine}\nstages:\n  - {stage}\n")


def burst(router: Router, n: int) -> list:
    async def main():
        async with router:
            return await asyncio.gather(*(router.submit(i) for i in range(n)), return_exceptions=True)

    return asyncio.run(main())


@pytest.fixture
def release():
    """An event the hung sync executors wait on; set after the test, so their threads end."""
    event = threading.Event()
    yield event
    event.set()


def test_a_burst_of_timeouts_names_the_stage_the_engine_and_the_limit(release):
    """A hung thread executor: two requests run, the rest wait in the queue; all time out."""
    router = Router(plan("{name: backbone, engine: gpu0, timeout_ms: 40}"),
                    {"backbone": {"gpu0": lambda x: release.wait()}})
    results = burst(router, 8)
    assert all(type(r) is TimeoutError for r in results), results
    for r in results:
        assert str(r).startswith(f"stage 'backbone' on engine 'gpu0' did not finish {TIMEOUT}"), str(r)
    states = {str(r).rsplit("(", 1)[1] for r in results}
    assert states == {"it was running)", "it was still waiting in the engine's queue)"}


@pytest.mark.parametrize("batched", [False, True], ids=["inline", "batched"])
def test_async_executors_time_out_with_the_same_message(batched):
    batch = ", batch: {size: 4, max_wait_ms: 1}" if batched else ""

    async def hang(x):
        await asyncio.Event().wait()

    router = Router(plan("{name: head, engine: gpu0, timeout_ms: 40" + batch + "}"), {"head": {"gpu0": hang}})
    results = burst(router, 6)
    assert all(type(r) is TimeoutError for r in results), results
    assert all(str(r).startswith(f"stage 'head' on engine 'gpu0' did not finish {TIMEOUT}") for r in results)


def test_an_executors_own_timeout_error_is_passed_on_as_it_is():
    async def fails(x):
        raise TimeoutError("the device did not answer")

    results = burst(Router(plan("{name: head, engine: gpu0, timeout_ms: 5000}"), {"head": {"gpu0": fails}}), 2)
    assert [str(r) for r in results] == ["the device did not answer"] * 2


@pytest.mark.parametrize("kind", ["sync", "async", "batched"])
def test_an_exception_without_a_message_gets_one_naming_its_type_stage_and_engine(kind):
    batch = ", batch: {size: 2, max_wait_ms: 1}" if kind == "batched" else ""

    def sync(x):
        raise KeyError()

    async def asynchronous(x):
        raise KeyError()

    executor = sync if kind == "sync" else asynchronous
    router = Router(plan("{name: decode, engine: gpu0, timeout_ms: 5000" + batch + "}"),
                    {"decode": {"gpu0": executor}})
    results = burst(router, 3)
    assert all(type(r) is KeyError for r in results), results  # the type is the executor's own
    assert all("KeyError with no message from the executor of stage 'decode' on engine 'gpu0'" in str(r)
               for r in results)


def test_an_exception_with_a_message_is_left_alone():
    def fails(x):
        raise ValueError("bad jpeg")

    results = burst(Router(plan("{name: decode, engine: gpu0, timeout_ms: 5000}"), {"decode": {"gpu0": fails}}), 1)
    assert type(results[0]) is ValueError and results[0].args == ("bad jpeg",)


def test_submit_syncs_own_timeout_names_where_the_request_was(release):
    router = Router(plan("{name: backbone, engine: gpu0, timeout_ms: 60000}"),
                    {"backbone": {"gpu0": lambda x: release.wait()}})
    with router:
        with pytest.raises(TimeoutError) as caught:
            router.submit_sync("jpeg", timeout=0.05)
        release.set()
    assert str(caught.value) == ("submit_sync() stopped waiting after its 0.05 s timeout; it was at stage "
                                 "'backbone' on engine 'gpu0', and goes on in the router")


def test_rejections_say_where_and_why(release):
    router = Router(plan("{name: backbone, engine: gpu0, timeout_ms: 40}",
                         "gpu0: {kind: gpu, max_concurrency: 1, max_queue: 0}"),
                    {"backbone": {"gpu0": lambda x: release.wait()}})
    results = burst(router, 2)
    rejected = [r for r in results if isinstance(r, Rejected)]
    assert rejected and str(rejected[0]).startswith("rejected (queue_full) at stage 'backbone' on engine 'gpu0'")
