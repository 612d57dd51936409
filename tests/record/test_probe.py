"""The probe API on real threads and event loops: timings, statuses, extras, parents."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

import loadprobe
from loadprobe.record import buffers as _buffers
from loadprobe import probe, request

from ..conftest import by_stage, stopped_spans


def test_without_a_recorder_probes_are_plain_calls():
    @probe("idle")
    def double(x):
        return 2 * x

    assert double(21) == 42
    with probe("block") as span:
        span.batch = 3
    assert _buffers.buffered() == 0


def test_a_20ms_sleep_records_about_20ms(recorder):
    @probe("sleep")
    def sleep():
        time.sleep(0.02)

    outer = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        sleep()
        outer.append(time.perf_counter_ns() - t0)
    rows = stopped_spans(recorder)
    durations = sorted(r["dur_ns"] for r in rows)
    assert len(durations) == 5
    for recorded, wall in zip(durations, sorted(outer)):
        assert 20_000_000 <= recorded <= wall  # never less than the sleep, never more than the caller saw


def test_stage_names_forms_and_metadata(recorder):
    @probe
    def bare():
        """doc"""
        return "bare"

    @probe()
    def empty_call():
        return "empty"

    @probe("named")
    def named():
        return "named"

    def opens_a_block():
        with probe():
            pass

    @probe("")
    def named_nothing():
        with probe(""):  # an empty name is no name: never a stage named ""
            return "nothing"

    assert (bare(), empty_call(), named(), named_nothing()) == ("bare", "empty", "named", "nothing")
    opens_a_block()
    assert bare.__doc__ == "doc" and bare.__name__ == "bare" and bare.__wrapped__ is not None
    stages = set(by_stage(stopped_spans(recorder)))
    assert stages == {
        "test_stage_names_forms_and_metadata.<locals>.bare",
        "test_stage_names_forms_and_metadata.<locals>.empty_call",
        "named",
        "test_stage_names_forms_and_metadata.<locals>.opens_a_block",
        "test_stage_names_forms_and_metadata.<locals>.named_nothing",
    }


def test_exceptions_pass_through_unchanged_and_set_status(recorder):
    error = ValueError("bad input")

    @probe("fails")
    def fails():
        raise error

    @probe("times_out")
    def times_out():
        raise TimeoutError

    @probe("slow")
    async def slow():
        await asyncio.sleep(1)

    async def wait_for_slow():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slow(), 0.01)

    with pytest.raises(ValueError) as caught:
        fails()
    assert caught.value is error
    with pytest.raises(TimeoutError):
        times_out()
    with pytest.raises(KeyError):
        with probe("block"):
            raise KeyError("k")
    asyncio.run(wait_for_slow())
    status = {stage: rows[0]["status"] for stage, rows in by_stage(stopped_spans(recorder)).items()}
    assert status == {"fails": "error", "times_out": "timeout", "block": "error", "slow": "cancelled"}


def test_extras_from_callables_constants_and_span_attributes(recorder, caplog):
    class Tensor:
        def __init__(self, *shape):
            self.shape = shape

    @probe("backbone", batch=lambda x: x.shape[0], shape=lambda x: x.shape, engine="npu",
           flops=lambda x: 8.2e9 * x.shape[0], bytes=lambda x: 25e6)
    def backbone(x):
        return x.shape[0]

    @probe("broken", batch=lambda x: x.missing)
    def broken(x):
        return "still ran"

    assert backbone(Tensor(4, 3, 640, 640)) == 4
    assert broken(Tensor(1)) == "still ran"
    with probe("nms") as span:
        span.batch = 7
        span.shape = [(7, 4), (7,)]
        span.engine = "gpu0"
        span.queue_ns = 1500
    stats_before_stop = recorder.stats()
    rows = by_stage(stopped_spans(recorder))
    b = rows["backbone"][0]
    assert (b["batch"], b["shape"], b["engine"], b["flops"], b["bytes"]) == (4, "4x3x640x640", "npu", 4 * 8.2e9, 25e6)
    assert rows["broken"][0]["batch"] is None and rows["broken"][0]["status"] == "ok"
    assert stats_before_stop.extractor_errors == 1
    n = rows["nms"][0]
    assert (n["batch"], n["shape"], n["engine"], n["queue_ns"]) == (7, "7x4,7", "gpu0", 1500)


def test_nested_spans_attach_to_their_parent_and_request(recorder):
    @probe("inner")
    def inner():
        return 1

    @probe("outer")
    def outer():
        with probe("block"):
            return inner()

    with request(id="req-1"):
        outer()
    outer()  # outside any request
    rows = stopped_spans(recorder)
    ids = {(r["stage"], r["request_id"]): r for r in rows}
    root = ids[("request", "req-1")]
    assert root["parent_id"] is None
    assert ids[("outer", "req-1")]["parent_id"] == root["span_id"]
    assert ids[("block", "req-1")]["parent_id"] == ids[("outer", "req-1")]["span_id"]
    assert ids[("inner", "req-1")]["parent_id"] == ids[("block", "req-1")]["span_id"]
    assert ids[("outer", None)]["parent_id"] is None
    assert ids[("inner", None)]["parent_id"] == ids[("block", None)]["span_id"]
    assert len({r["span_id"] for r in rows}) == len(rows)


def test_1000_concurrent_asyncio_tasks_keep_their_own_request_and_parent(recorder):
    @probe("decode")
    def decode(i):
        return i

    @probe("model", batch=lambda i: i)
    async def model(i):
        await asyncio.sleep(0.001 * (i % 7))
        with probe("post") as span:
            span.batch = decode(i)
            await asyncio.sleep(0)
        return i

    @request(id=lambda i: f"r{i}")
    async def handle(i):
        await asyncio.sleep(0.001 * (i % 5))
        decode(i)
        return await model(i)

    async def main():
        return await asyncio.gather(*(handle(i) for i in range(1000)))

    assert asyncio.run(main()) == list(range(1000))
    rows = stopped_spans(recorder)
    assert len(rows) == 1000 * 5
    by_id = {r["span_id"]: r for r in rows}
    for row in rows:
        i = int(row["request_id"][1:])
        if row["stage"] == "request":
            assert row["parent_id"] is None
            continue
        parent = by_id[row["parent_id"]]
        assert parent["request_id"] == row["request_id"]
        expected_parent = {"model": "request", "post": "model"}.get(row["stage"])
        if row["stage"] == "decode":
            expected_parent = "post" if parent["stage"] == "post" else "request"
        assert parent["stage"] == expected_parent
        if row["batch"] is not None:
            assert row["batch"] == i


def test_threads_keep_their_own_requests(recorder):
    @probe("work")
    def work(tag):
        return tag

    def serve(t):
        for n in range(300):
            with request(id=f"t{t}-{n}"):
                assert work((t, n)) == (t, n)

    threads = [threading.Thread(target=serve, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rows = stopped_spans(recorder)
    roots = {r["request_id"]: r["span_id"] for r in rows if r["stage"] == "request"}
    works = [r for r in rows if r["stage"] == "work"]
    assert len(roots) == len(works) == 1800
    assert all(roots[w["request_id"]] == w["parent_id"] for w in works)


def test_to_thread_carries_the_request(recorder):
    @probe("blocking")
    def blocking():
        return threading.get_ident()

    @request(id="async-req")
    async def handle():
        return await asyncio.to_thread(blocking)

    assert asyncio.run(handle()) != threading.get_ident()
    rows = {r["stage"]: r for r in stopped_spans(recorder)}
    assert rows["blocking"]["request_id"] == "async-req"
    assert rows["blocking"]["parent_id"] == rows["request"]["span_id"]


def test_a_sync_probe_around_an_event_loop_does_not_capture_its_requests(recorder):
    @probe("step")
    def step():
        return 1

    @request()
    async def handle():
        return step()

    @probe("main")
    def main():
        return asyncio.run(handle())

    main()
    rows = {r["stage"]: r for r in stopped_spans(recorder)}
    assert rows["step"]["parent_id"] == rows["request"]["span_id"]
    assert rows["request"]["parent_id"] is None


def test_generators_are_timed_to_exhaustion_and_async_generators_keep_send_semantics(recorder):
    @probe("stream")
    def stream(n):
        for i in range(n):
            time.sleep(0.002)
            yield i

    @probe("astream")
    async def astream():
        received = yield 1
        yield received * 10

    async def consume():
        agen = astream()
        first = await agen.__anext__()
        second = await agen.asend(5)
        with pytest.raises(StopAsyncIteration):
            await agen.__anext__()
        return first, second

    assert list(stream(5)) == [0, 1, 2, 3, 4]
    assert asyncio.run(consume()) == (1, 50)
    rows = by_stage(stopped_spans(recorder))
    assert rows["stream"][0]["dur_ns"] >= 10_000_000
    assert rows["astream"][0]["status"] == "ok"


def test_probes_never_raise_into_the_host_when_the_flusher_breaks(recorder, monkeypatch, caplog):
    def broken_batch(rows, offset):
        raise RuntimeError("converter bug")

    monkeypatch.setattr(recorder._flusher.converter, "batch", broken_batch)

    @probe("work")
    def work(x):
        return x + 1

    with caplog.at_level(logging.WARNING, logger="loadprobe"):
        assert [work(i) for i in range(100)] == list(range(1, 101))
        assert loadprobe.flush()
        assert [work(i) for i in range(50)] == list(range(1, 51))
        assert loadprobe.flush()
    warnings = [r for r in caplog.records if "could not convert" in r.getMessage()]
    assert len(warnings) == 1
    stats = recorder.stats()
    assert stats.spans_dropped == 150 and stats.spans_written == 0  # lost, but counted


def test_async_generators_pass_every_throw_and_close_through(recorder):
    log = []

    async def inner():
        try:
            while True:
                try:
                    yield "item"
                except ValueError as exc:
                    log.append(str(exc))
        finally:
            log.append("closed")

    wrapped = probe("agen")(inner)

    async def drive(gen):
        assert await gen.__anext__() == "item"
        assert await gen.athrow(ValueError("one")) == "item"
        assert await gen.athrow(ValueError("two")) == "item"
        await gen.aclose()

    asyncio.run(drive(inner()))
    plain = list(log)
    log.clear()
    asyncio.run(drive(wrapped()))
    assert log == plain == ["one", "two", "closed"]
    rows = by_stage(stopped_spans(recorder))
    assert rows["agen"][0]["status"] == "cancelled"


def test_record_span_attaches_a_batch_execution_to_each_member_request(recorder):
    from loadprobe import record_span

    t0 = time.perf_counter_ns()
    t1 = t0 + 5_000_000
    for i in range(3):
        with request(id=f"r{i}"):
            record_span("backbone", t0, t1, batch=3, queue_ns=1000 * i, flops=9e9 if i == 0 else None)
    record_span("orphan", t0, t1, status="error")
    rows = stopped_spans(recorder)
    backbone = sorted((r for r in rows if r["stage"] == "backbone"), key=lambda r: r["request_id"])
    roots = {r["request_id"]: r["span_id"] for r in rows if r["stage"] == "request"}
    assert [r["request_id"] for r in backbone] == ["r0", "r1", "r2"]
    assert all(r["parent_id"] == roots[r["request_id"]] for r in backbone)
    assert {r["dur_ns"] for r in backbone} == {5_000_000}
    assert [r["queue_ns"] for r in backbone] == [0, 1000, 2000]
    assert [r["flops"] for r in backbone] == [9e9, None, None]
    orphan = [r for r in rows if r["stage"] == "orphan"]
    assert orphan[0]["status"] == "error" and orphan[0]["request_id"] is None


def test_record_span_with_bad_times_counts_an_extractor_error(recorder):
    from loadprobe import record_span

    record_span("bad", "soon", None)
    assert recorder.stats().extractor_errors == 1


def test_record_span_with_a_request_id_is_that_requests_root(recorder):
    from loadprobe import record_span

    t0 = time.perf_counter_ns()
    record_span("client", t0, t0 + 1000, request_id="abc-1", queue_ns=10)
    (row,) = stopped_spans(recorder)
    assert (row["stage"], row["request_id"], row["parent_id"], row["dur_ns"]) == ("client", "abc-1", None, 1000)


def test_what_adapters_ask_the_hot_path(recorder):
    """recording(), in_request() and note_extract_error(): the adapters' and the router's only view of it."""
    from loadprobe.record.probe import in_request, note_extract_error, recording

    assert recording() and not in_request()
    seen = {}

    async def task():
        seen["task"] = in_request()

    with request():
        seen["request"] = in_request()
        asyncio.run(task())  # asyncio.run copies the context: the task is inside the request too
        with probe("inner"):
            seen["inner"] = in_request()
    with probe("outside"):
        seen["outside"] = in_request()
    assert seen == {"request": True, "task": True, "inner": True, "outside": False}
    note_extract_error()
    assert recorder.stats().extractor_errors == 1
    other = threading.Thread(target=note_extract_error)  # a thread with no buffer yet gets one
    other.start()
    other.join()
    assert recorder.stats().extractor_errors == 2
    loadprobe.stop()
    assert not recording()


def test_the_fast_wrapper_reads_no_module_attribute_per_call():
    """The hot path's globals are its own module's: after the split into probe/buffers/stages,
    a plain @probe must not pay a module attribute lookup (``_buffers.x``) per call."""
    import types

    from loadprobe.record import probe as probe_module

    wrapper = probe("fast")(lambda x: x)
    names = wrapper.__code__.co_names
    for name in names:
        value = wrapper.__globals__.get(name)
        assert not isinstance(value, types.ModuleType), f"{name}.<attribute> read on every call"
    assert wrapper.__globals__ is vars(probe_module)
    assert {"_active", "_env_pending", "_local", "_frame_get", "_span_ids", "_append"} <= set(names)
