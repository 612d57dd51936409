"""A stage's CPU share from its sampled spans, and the plan that counts only that share as work."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

import loadprobe
from loadprobe import probe, request
from loadprobe.plan.context import cpu_load_pct
from loadprobe.record import probe as probe_module

pytestmark = pytest.mark.timeout(120)

REQUESTS = 120


def spin(ms: float) -> None:
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


@pytest.fixture(scope="module")
def awaiting_service(tmp_path_factory):
    """An event loop serving requests that compute 1 ms (``featurize``), await a 4 ms downstream call holding
    1 ms of work of their own (``remote_model``), and wait 2 ms in a sync call (``lookup``, a blocking read)."""
    out = tmp_path_factory.mktemp("awaiting") / "data"
    share, probe_module._cpu_share = probe_module._cpu_share, 1.0
    try:
        loadprobe.start(out, service="awaiting", sample_devices=False, flush_interval_s=0.05)

        @probe("featurize")
        def featurize():
            spin(1.0)

        @probe("lookup")
        def lookup():
            time.sleep(0.002)

        @probe("remote_model")
        async def remote_model():
            spin(0.5)
            await asyncio.sleep(0.004)
            spin(0.5)

        @request()
        def handle_sync():
            featurize()
            lookup()

        async def handle(i: int):
            await asyncio.sleep(i * 0.002)  # spread out: several requests in flight at once
            with request():  # a block on the loop: its own CPU is not timed, its children's are
                featurize()
                await remote_model()

        async def main():
            await asyncio.gather(*(handle(i) for i in range(REQUESTS)))

        asyncio.run(main())
        for _ in range(40):
            handle_sync()
        loadprobe.stop()
    finally:
        probe_module._cpu_share = share
    return out


def test_each_stage_reads_the_share_of_its_time_that_was_work(awaiting_service):
    portrait = loadprobe.analyze([awaiting_service])
    stages = {s.name: s for s in portrait.stages}
    assert stages["featurize"].cpu_spans == REQUESTS + 40 and stages["featurize"].cpu_share > 0.9
    assert stages["lookup"].cpu_share < 0.2
    remote = stages["remote_model"]
    # 1 ms of work in its 4+ ms (more while the loop runs the other requests' steps): its work, not its wall.
    assert remote.cpu_spans == REQUESTS and remote.self_ms_mean > 4.0
    assert 0.9 < remote.cpu_share * remote.self_ms_mean < 2.0
    # The sync requests' own time is next to nothing, and all of it work: their children's CPU is not theirs.
    assert stages["request"].cpu_spans == 40 and stages["request"].self_ms_mean < 0.5
    assert stages["request"].cpu_share > 0.5


def test_a_recording_without_cpu_times_reads_none(tmp_path):
    from tests.support.served_recording import Step, record_served
    import numpy as np

    record_served(tmp_path / "data", np.arange(50) / 50.0, [Step("request", lambda r, n: np.full(n, 1.0)),
                                                           Step("work", lambda r, n: np.full(n, 2.0))], cores=2)
    stages = {s.name: s for s in loadprobe.analyze([tmp_path / "data"]).stages}
    assert stages["work"].cpu_share is None and stages["work"].cpu_spans is None


def test_the_host_load_counts_the_work_not_the_awaits(awaiting_service):
    portrait = loadprobe.analyze([awaiting_service])
    as_wall = replace(portrait, stages=[replace(s, cpu_share=None, cpu_spans=None) for s in portrait.stages])
    work, wall = cpu_load_pct(portrait, 100.0, 2), cpu_load_pct(as_wall, 100.0, 2)
    # Per request about 1.75 ms of work (2 ms in the async ones, 1 ms in the sync ones) against 6+ ms of wall.
    # At 100 req/s on 2 cores: 1.75 ms x 100 / 2 cores = 8.75% busy.
    assert 100.0 * 0.1 * 1.4 / 2 < work < 100.0 * 0.1 * 2.5 / 2 and wall > 2.5 * work, (work, wall)


def test_the_plan_carries_the_share_and_its_simulation_overlaps_the_waits(awaiting_service):
    from loadprobe.plan.constraints import Constraints
    from loadprobe.plan.planner import recommend

    portrait = loadprobe.analyze([awaiting_service])
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    config = plan.to_pipeline()
    stages = {s.name: s for s in config.stages}
    assert stages["remote_model"].service_time_ms.cpu_share < 0.5
    assert stages["featurize"].service_time_ms.cpu_share > 0.9
    decision = next(d for d in plan.recommended.decisions if d.stage == "remote_model")
    assert "uses a core" in decision.why["service_time_ms"]
    # The CPU engine is loaded with remote_model's work, not its wait: per request, well under the wall time of
    # the stages it runs (its 4+ ms await among them), about the 1.75 ms of work.
    est = plan.recommended.estimate
    per_request_ms = est.offered["cpu"] * plan.recommended.engines["cpu"]["servers"] / est.rate_rps * 1000.0
    wall_ms = sum(s.service_time_ms.mean for s in config.stages if s.engine == "cpu")
    assert 1.0 < per_request_ms < 3.0 and per_request_ms < 0.5 * wall_ms, (per_request_ms, wall_ms)
