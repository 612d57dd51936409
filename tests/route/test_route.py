"""loadprobe.route.Router: stages, batches, queues, shedding, fallback, retries, spans, metrics."""

from __future__ import annotations

import asyncio
import threading

import pytest

from loadprobe import pipeline
from loadprobe._errors import LoadprobeError
from loadprobe.route import Rejected, Router

from ..conftest import by_stage, stopped_spans


def plan(engines: str, stages: str, routing: str = "") -> pipeline.PipelineConfig:
    return pipeline.loads(f"version: 1\nservice: t\nengines:\n{engines}\nstages:\n{stages}\n{routing}")


class Gate:
    """An async executor that holds every call until ``open()``; counts calls and batch sizes."""

    def __init__(self, fn=lambda x: x) -> None:
        self.fn = fn
        self.event = asyncio.Event()
        self.calls: list = []

    async def __call__(self, x):
        self.calls.append(x)
        await self.event.wait()
        return self.fn(x)

    def open(self) -> None:
        self.event.set()


async def until(predicate, timeout_s: float = 5) -> None:
    """Yield to the loop until ``predicate()`` holds (bounded: fails rather than hangs)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.001)


def test_a_request_passes_every_stage_in_order_with_sync_and_async_executors():
    config = plan("  cpu: {kind: cpu, max_concurrency: 2, max_queue: 40}\n"
                  "  gpu: {kind: gpu, max_concurrency: 1, max_queue: 20}",
                  "  - {name: a, engine: cpu, timeout_ms: 1000}\n"
                  "  - {name: b, engine: gpu, timeout_ms: 1000}\n"
                  "  - {name: c, engine: cpu, timeout_ms: 1000}")
    threads = set()

    def a(x):
        threads.add(threading.current_thread().name)
        return x + ["a"]

    async def b(x):
        return x + ["b"]

    router = Router(config, {"a": {"cpu": a}, "b": {"gpu": b}, "c": {"cpu": lambda x: x + ["c"]}})

    async def main():
        async with router:
            return await asyncio.gather(*(router.submit([i]) for i in range(20)))

    results = asyncio.run(main())
    assert results == [[i, "a", "b", "c"] for i in range(20)]
    assert all(name.startswith("loadprobe-route-cpu") for name in threads)  # sync: the engine's own threads
    counts = router.metrics()["requests"]
    assert counts == {"submitted": 20, "ok": 20, "rejected": 0, "failed": 0, "in_flight": 0}


def test_missing_executors_are_named():
    config = plan("  cpu: {kind: cpu, max_concurrency: 1, max_queue: 1}\n  gpu: {kind: gpu, max_concurrency: 1, "
                  "max_queue: 1}",
                  "  - {name: a, engine: cpu, timeout_ms: 10, fallback: {engine: gpu}}")
    with pytest.raises(LoadprobeError, match=r"no executor for a\.gpu .*executors for unknown stages: z"):
        Router(config, {"a": {"cpu": print}, "z": {}})


def test_batches_fill_to_size_or_close_with_the_window():
    config = plan("  gpu: {kind: gpu, max_concurrency: 1, max_queue: 64}",
                  "  - {name: m, engine: gpu, timeout_ms: 5000, batch: {size: 4, max_wait_ms: 40}}")
    sizes = []

    def run(batch):
        sizes.append(len(batch))
        return [x * 10 for x in batch]

    router = Router(config, {"m": {"gpu": run}})

    async def main():
        async with router:
            full = await asyncio.gather(*(router.submit(i) for i in range(8)))  # two full batches, no waiting
            partial = await asyncio.gather(*(router.submit(i) for i in range(3)))  # the window closes on 3
            return full, partial

    full, partial = asyncio.run(main())
    assert full == [i * 10 for i in range(8)] and partial == [0, 10, 20]
    assert sizes == [4, 4, 3]
    engine = router.metrics()["engines"]["gpu"]
    assert engine["executions"] == 3 and engine["requests"] == 11


def test_a_batched_executor_must_return_one_result_per_payload():
    config = plan("  gpu: {kind: gpu, max_concurrency: 1, max_queue: 8}",
                  "  - {name: m, engine: gpu, timeout_ms: 1000, batch: {size: 2, max_wait_ms: 1}}")

    async def main():
        async with Router(config, {"m": {"gpu": lambda batch: batch[:1]}}) as router:
            return await asyncio.gather(router.submit(1), router.submit(2), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, TypeError) and "list of 2 results" in str(r) for r in results)


def test_a_full_queue_rejects_at_once_with_a_capacity_hint():
    config = plan("  gpu: {kind: gpu, max_concurrency: 1, max_queue: 2}",
                  "  - {name: m, engine: gpu, timeout_ms: 5000}")
    gate = Gate()

    async def main():
        async with Router(config, {"m": {"gpu": gate}}) as router:
            held = [asyncio.create_task(router.submit(i)) for i in range(3)]  # 1 in service, 2 waiting
            await until(lambda: router.metrics()["engines"]["gpu"]["queue_len"] == 2)
            with pytest.raises(Rejected) as caught:
                await router.submit(99)
            gate.open()
            return caught.value, await asyncio.gather(*held), router.metrics()

    rejected, results, metrics = asyncio.run(main())
    assert rejected.reason == "queue_full" and rejected.engine == "gpu" and rejected.stage == "m"
    assert rejected.retry_after_ms > 0
    assert results == [0, 1, 2]
    assert metrics["rejects"] == {"queue_full": 1}
    assert metrics["engines"]["gpu"]["peak_queue_len"] == 2


def test_a_full_queue_sheds_the_lowest_priority_and_serves_the_highest_first():
    config = plan("  gpu: {kind: gpu, max_concurrency: 1, max_queue: 3}",
                  "  - {name: m, engine: gpu, timeout_ms: 5000}",
                  "routing: {shed: {by: priority}}")
    gate = Gate()

    async def main():
        async with Router(config, {"m": {"gpu": gate}}) as router:
            first = asyncio.create_task(router.submit("first"))
            await until(lambda: gate.calls)
            low = [asyncio.create_task(router.submit(f"low{i}", priority=0)) for i in range(3)]
            await until(lambda: router.metrics()["engines"]["gpu"]["queue_len"] == 3)
            high = asyncio.create_task(router.submit("high", priority=5))  # sheds the newest low
            await until(lambda: low[2].done())
            with pytest.raises(Rejected) as same:
                await router.submit("low-again", priority=0)  # equal priority never sheds
            gate.open()
            results = await asyncio.gather(first, high, *low, return_exceptions=True)
            return results, same.value

    results, same = asyncio.run(main())
    assert results[:4] == ["first", "high", "low0", "low1"]
    assert isinstance(results[4], Rejected) and results[4].reason == "shed"
    assert same.reason == "queue_full"
    assert gate.calls == ["first", "high", "low0", "low1"]  # the high one jumped the queue


def test_fallback_moves_at_most_max_ratio_while_the_primary_queue_is_over_its_threshold():
    config = plan("  npu: {kind: npu, max_concurrency: 1, max_queue: 100}\n"
                  "  gpu: {kind: gpu, max_concurrency: 100, max_queue: 100}",
                  "  - name: m\n    engine: npu\n    timeout_ms: 5000\n"
                  "    fallback: {engine: gpu, when: {queue_len_over: 2}, max_ratio: 0.3, otherwise: queue}")
    npu = Gate(lambda x: ("npu", x))

    async def gpu(x):
        return ("gpu", x)

    async def main():
        async with Router(config, {"m": {"npu": npu, "gpu": gpu}}, window_s=3600) as router:
            tasks = []
            for i in range(40):
                tasks.append(asyncio.create_task(router.submit(i)))
                await asyncio.sleep(0)
            await until(lambda: sum(t.done() for t in tasks) + router.metrics()["engines"]["npu"]["queue_len"] >= 39)
            npu.open()
            return await asyncio.gather(*tasks), router.metrics()

    results, metrics = asyncio.run(main())
    moved = [r for r in results if r[0] == "gpu"]
    assert len(results) == 40 and 0 < len(moved) <= 0.3 * 40  # otherwise: queue -> the rest waited on the npu
    assert metrics["stages"]["m"]["failovers"] == len(moved)
    assert metrics["stages"]["m"]["failover_share"] <= 0.3


def test_timeouts_are_retried_within_the_stage_attempts_and_the_budget():
    config = plan("  cpu: {kind: cpu, max_concurrency: 4, max_queue: 16}",
                  "  - {name: m, engine: cpu, timeout_ms: 20, retry: {max_attempts: 3}}",
                  "routing: {retry: {budget_ratio: 0.5, max_attempts: 1}}")
    calls = []

    async def flaky(x):
        calls.append(x)
        if calls.count(x) == 1:
            await asyncio.sleep(10)  # the first attempt of every request hangs past its timeout
        return x

    async def main():
        async with Router(config, {"m": {"cpu": flaky}}) as router:
            results = []
            for i in range(10):  # one at a time: the budget is known at each retry
                try:
                    results.append(await router.submit(i))
                except TimeoutError:
                    results.append("timeout")
            return results, router.metrics()

    results, metrics = asyncio.run(main())
    retried = [r for r in results if r != "timeout"]
    assert metrics["retries"]["allowed"] == len(retried) <= 0.5 * 10
    assert metrics["retries"]["denied"] == 10 - len(retried)
    assert metrics["engines"]["cpu"]["timeouts"] == 10
    assert len(calls) == 10 + len(retried)


def test_submit_sync_from_threads_carries_the_callers_request(recorder):
    from loadprobe import request

    config = plan("  cpu: {kind: cpu, max_concurrency: 2, max_queue: 64}",
                  "  - {name: a, engine: cpu, timeout_ms: 1000}\n"
                  "  - {name: b, engine: cpu, timeout_ms: 1000, batch: {size: 4, max_wait_ms: 2}}")
    router = Router(config, {"a": {"cpu": lambda x: x * 2}, "b": {"cpu": lambda xs: [x + 1 for x in xs]}})
    results = {}

    def client(i: int) -> None:
        with request(id=f"client-{i}"):
            results[i] = router.submit_sync(i, timeout=10)

    with router:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        direct = router.submit_sync(100)
    assert results == {i: i * 2 + 1 for i in range(8)} and direct == 201
    with pytest.raises(Rejected, match="closed"):
        router.submit_sync(1)

    spans = by_stage(stopped_spans(recorder))
    assert {s["request_id"] for s in spans["a"]} >= {f"client-{i}" for i in range(8)}
    # the clients' own 8 requests, and one the router opened for the direct call, which had none
    ids = [s["request_id"] for s in spans["request"]]
    assert sorted(i for i in ids if i.startswith("client-")) == [f"client-{i}" for i in range(8)]
    assert len(ids) == 9
    for row in spans["a"] + spans["b"]:
        assert row["engine"] == "cpu" and row["status"] == "ok" and row["queue_ns"] >= 0
    assert all(row["batch"] >= 1 for row in spans["b"]) and all(row["batch"] is None for row in spans["a"])
    assert len(spans["b"]) == 9


def test_every_attempt_is_recorded_with_its_status(recorder):
    config = plan("  cpu: {kind: cpu, max_concurrency: 1, max_queue: 1}",
                  "  - {name: m, engine: cpu, timeout_ms: 30}")

    async def run(x):
        if x == "boom":
            raise ValueError("boom")
        if x == "slow":
            await asyncio.sleep(10)
        return x

    async def main():
        async with Router(config, {"m": {"cpu": run}}) as router:
            return await asyncio.gather(router.submit("ok"), router.submit("boom"), router.submit("slow"),
                                        return_exceptions=True)

    results = asyncio.run(main())
    assert results[0] == "ok" and isinstance(results[1], ValueError)
    assert isinstance(results[2], (TimeoutError, Rejected))
    spans = by_stage(stopped_spans(recorder))
    statuses = sorted(row["status"] for row in spans["m"])
    expected = ["error", "ok", "timeout"] if isinstance(results[2], TimeoutError) else ["error", "ok"]
    assert statuses == expected
    assert sorted(row["status"] for row in spans["request"]) == sorted(
        ["ok", "error", "timeout" if isinstance(results[2], TimeoutError) else "error"])
    assert {row["parent_id"] for row in spans["m"]} <= {row["span_id"] for row in spans["request"]}


def test_canary_takes_its_weight_of_requests(tmp_path):
    (tmp_path / "canary.yaml").write_text("version: 1\nservice: t\nengines:\n  gpu: {kind: gpu, max_concurrency: 4, "
                                          "max_queue: 8}\nstages:\n  - {name: m, engine: gpu, timeout_ms: 1000}\n")
    (tmp_path / "pipeline.yaml").write_text("version: 1\nservice: t\nengines:\n  cpu: {kind: cpu, max_concurrency: 4,"
                                            " max_queue: 8}\nstages:\n  - {name: m, engine: cpu, timeout_ms: 1000}\n"
                                            "routing: {canary: {config: canary.yaml, weight: 0.25}}\n")

    async def on_cpu(x):
        return "cpu"

    async def on_gpu(x):
        return "gpu"

    router = Router.load(tmp_path / "pipeline.yaml", {"m": {"cpu": on_cpu, "gpu": on_gpu}})

    async def main():
        async with router:
            return [await router.submit(i) for i in range(40)]

    results = asyncio.run(main())
    assert results.count("gpu") == 10
    assert router.metrics()["canary"]["sent"] == 10


def test_metrics_are_served_for_prometheus():
    pytest.importorskip("prometheus_client")
    import socket
    import urllib.request

    config = plan("  cpu: {kind: cpu, max_concurrency: 1, max_queue: 1}", "  - {name: m, engine: cpu, timeout_ms: 1000}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Router(config, {"m": {"cpu": lambda x: x}}) as router:
        router.submit_sync(1)
        server, thread = router.serve_metrics(port)
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
    assert 'loadprobe_route_engine_queue_len{engine="cpu"} 0.0' in text
    assert 'loadprobe_route_requests_total{outcome="ok"} 1.0' in text
    assert 'loadprobe_route_engine_utilisation{engine="cpu"}' in text
    assert 'loadprobe_route_late_results_total{engine="cpu"} 0.0' in text  # published from the start, at 0


def test_shapes_and_precisions_the_engine_does_not_take_go_to_the_fallback_uncapped():
    config = plan("  npu: {kind: npu, max_concurrency: 2, max_queue: 10}\n"
                  "  gpu: {kind: gpu, max_concurrency: 2, max_queue: 10}",
                  "  - name: backbone\n    engine: npu\n    precision: int8\n"
                  "    input: {shape: [3, 640, null], dynamic: false}\n    timeout_ms: 1000\n"
                  "    fallback: {engine: gpu, max_ratio: 0.0}\n"
                  "  - {name: nms, engine: gpu, timeout_ms: 1000}")
    where = []
    executors = {"backbone": {"npu": lambda x: where.append("npu") or x, "gpu": lambda x: where.append("gpu") or x},
                 "nms": {"gpu": lambda x: x}}

    async def scenario():
        async with Router(config, executors) as router:
            await router.submit(1, shape=(3, 640, 480))  # fits: the null dimension takes any size
            await router.submit(2, shape=(3, 800, 480))  # out of range: to the GPU, though max_ratio is 0
            await router.submit(3, precision="fp16")     # needs more than int8
            await router.submit(4)                       # nothing said: the primary
            return router.metrics()

    metrics = asyncio.run(scenario())
    assert where == ["npu", "gpu", "gpu", "npu"]
    assert metrics["stages"]["backbone"]["routed_by_shape_or_precision"] == 2
    assert metrics["stages"]["backbone"]["failovers"] == 0


def test_a_shape_no_engine_takes_is_rejected_as_unsupported():
    config = plan("  npu: {kind: npu, max_concurrency: 1, max_queue: 4}",
                  "  - name: backbone\n    engine: npu\n    input: {shape: [3, 640, 640]}\n    timeout_ms: 1000")

    async def scenario():
        async with Router(config, {"backbone": {"npu": lambda x: x}}) as router:
            assert await router.submit("ok", shape=[3, 640, 640]) == "ok"
            with pytest.raises(Rejected) as exc:
                await router.submit("big", shape=[3, 1280, 1280])
            return exc.value

    rejected = asyncio.run(scenario())
    assert rejected.reason == "unsupported" and rejected.stage == "backbone"
