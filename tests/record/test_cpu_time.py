"""Per-span CPU time (``cpu_ns``): which part of a stage worked, on real threads and event loops."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from loadprobe import probe, request
from loadprobe.record import probe as probe_module
from loadprobe.record.env import CPU_SAMPLE_SHARE, cpu_sample_share

from ..conftest import stopped_spans

pytestmark = pytest.mark.timeout(60)


def spin(ms: float) -> None:
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


@pytest.fixture
def every_unit(monkeypatch):
    monkeypatch.setattr(probe_module, "_cpu_share", 1.0)


def _by_stage(rows):
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r["stage"], []).append(r)
    return out


def test_a_stage_that_sleeps_holds_wall_time_and_little_cpu(recorder, every_unit):
    @probe("work")
    def work():
        spin(4)

    @probe("wait")
    def wait():
        time.sleep(0.004)

    @request()
    def handle():
        work()
        wait()

    for _ in range(5):
        handle()
    spans = _by_stage(stopped_spans(recorder))
    for r in spans["work"]:
        assert r["cpu_ns"] >= 4_000_000 and r["cpu_ns"] <= r["dur_ns"] * 1.05
    for r in spans["wait"]:
        assert r["dur_ns"] >= 4_000_000 and r["cpu_ns"] < 0.25 * r["dur_ns"]
    for r in spans["request"]:  # its own: its children's 4 ms of CPU is theirs
        assert 0 <= r["cpu_ns"] < 1_000_000 and r["dur_ns"] >= 8_000_000


def test_an_async_stage_counts_its_own_steps_not_the_requests_the_loop_ran_meanwhile(recorder, every_unit):
    @probe("remote")
    async def remote():
        spin(1)
        await asyncio.sleep(0.01)  # meanwhile the other 19 requests spin on this thread
        spin(1)
        return "answer"

    @probe("busy")
    async def busy():
        spin(3)
        await asyncio.sleep(0)

    async def one():
        assert await remote() == "answer"
        await busy()

    async def main():
        await asyncio.gather(*(one() for _ in range(20)))

    asyncio.run(main())
    spans = _by_stage(stopped_spans(recorder))
    remote_rows = spans["remote"]
    assert len(remote_rows) == 20
    for r in remote_rows:
        assert 1_800_000 <= r["cpu_ns"] <= 6_000_000, r  # its 2 ms, not the others' spinning
    assert max(r["dur_ns"] for r in remote_rows) > 20_000_000
    assert all(r["cpu_ns"] >= 2_800_000 for r in spans["busy"])


def test_a_parent_keeps_its_own_cpu_and_not_what_ran_inside_it_or_beside_it(recorder, every_unit):
    """Awaited children run inside the parent's steps (taken off); tasks it gathers and threads it hands work to run
    outside them (never counted, never taken off): the parent's own 2 ms stays 2 ms either way."""
    @probe("child")
    async def child():
        spin(3)
        await asyncio.sleep(0)

    @probe("sync child")
    def sync_child():
        spin(3)

    @probe("awaits")
    async def awaits():
        spin(2)
        await child()
        sync_child()

    @probe("fans out")
    async def fans_out():
        spin(2)
        await asyncio.gather(child(), child())
        await asyncio.to_thread(sync_child)

    async def main():
        await awaits()
        await fans_out()

    asyncio.run(main())
    spans = _by_stage(stopped_spans(recorder))
    for name in ("awaits", "fans out"):
        (row,) = spans[name]
        assert 1_800_000 <= row["cpu_ns"] <= 3_000_000, (name, row["cpu_ns"])
    assert all(r["cpu_ns"] >= 2_800_000 for r in spans["child"] + spans["sync child"])


def test_async_errors_and_cancellation_pass_through_the_cpu_timer(recorder, every_unit):
    @probe("fails")
    async def fails():
        await asyncio.sleep(0)
        raise KeyError("x")

    @probe("slow")
    async def slow():
        await asyncio.sleep(10)

    async def main():
        with pytest.raises(KeyError):
            await fails()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slow(), 0.01)

    asyncio.run(main())
    spans = _by_stage(stopped_spans(recorder))
    assert spans["fails"][0]["status"] == "error" and spans["fails"][0]["cpu_ns"] is not None
    assert spans["slow"][0]["status"] == "cancelled" and spans["slow"][0]["dur_ns"] >= 10_000_000
    assert spans["slow"][0]["cpu_ns"] < 1_000_000


def test_blocks_inside_a_coroutine_and_generators_record_no_cpu(recorder, every_unit):
    @probe("gen")
    def gen():
        yield 1
        spin(1)
        yield 2

    async def main():
        with probe("block in loop"):
            await asyncio.sleep(0.001)
        async with probe("async block"):
            await asyncio.sleep(0.001)

    assert list(gen()) == [1, 2]
    asyncio.run(main())
    with probe("block on a thread"):
        spin(1)
    spans = _by_stage(stopped_spans(recorder))
    assert spans["gen"][0]["cpu_ns"] is None
    assert spans["block in loop"][0]["cpu_ns"] is None and spans["async block"][0]["cpu_ns"] is None
    assert spans["block on a thread"][0]["cpu_ns"] >= 1_000_000


def test_a_unit_is_sampled_whole_at_the_share_asked(recorder, monkeypatch):
    monkeypatch.setattr(probe_module, "_cpu_share", 0.25)

    @probe("leaf")
    def leaf():
        return 1

    @request()
    def handle():
        leaf()
        leaf()

    def serve():
        for _ in range(1000):
            handle()

    threads = [threading.Thread(target=serve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = stopped_spans(recorder)
    timed = {r["request_id"] for r in rows if r["cpu_ns"] is not None}
    requests = {r["request_id"] for r in rows}
    assert 0.19 < len(timed) / len(requests) < 0.31  # 2,000 draws at 0.25: 5 standard deviations either side
    for rid in timed:  # every span of a sampled request, none of the others
        assert all(r["cpu_ns"] is not None for r in rows if r["request_id"] == rid)
    assert sum(r["cpu_ns"] is not None for r in rows) == 3 * len(timed)


def test_no_sampling_records_no_cpu(recorder, monkeypatch):
    monkeypatch.setattr(probe_module, "_cpu_share", 0.0)

    @probe("leaf")
    def leaf():
        return 1

    for _ in range(200):
        leaf()
    assert all(r["cpu_ns"] is None for r in stopped_spans(recorder))


@pytest.mark.parametrize("text, share", [(None, CPU_SAMPLE_SHARE), ("", CPU_SAMPLE_SHARE), ("0", 0.0), ("1", 1.0),
                                         ("0.5", 0.5), ("7", 1.0), ("-1", 0.0), ("lots", CPU_SAMPLE_SHARE),
                                         ("nan", CPU_SAMPLE_SHARE)])
def test_the_sample_share_from_the_environment(text, share):
    assert cpu_sample_share(text) == share
