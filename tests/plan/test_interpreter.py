"""A Python service's interpreter lock bounds what its worker processes carry, whatever the cores (issue #32.2).

The recorder samples each process's Python-thread CPU (``interpreter:<pid>``); the planner reads
it as one more queue: ``processes`` x 1000 / (interpreter ms per request) requests per second.
"""

from __future__ import annotations

import numpy as np
import pytest

import loadprobe
from loadprobe.estimate.queueing import INTERPRETER, EngineCapacity, Placement, estimate
from loadprobe.plan.constraints import Constraints
from loadprobe.plan.context import host_cpu_capacity, interpreter
from loadprobe.plan.planner import recommend

from ..support.served_recording import Step, record_served

pytestmark = pytest.mark.timeout(300)

STAGES = [Step("outside", lambda rng, n: rng.lognormal(np.log(0.8), 0.3, n)),
          Step("embed", lambda rng, n: rng.gamma(4.0, 0.3, n))]  # 0.8 + 1.2 ms of work per request


def _portrait(tmp_path, interpreter_spec, name="data"):
    arrivals = np.cumsum(np.random.default_rng(7).exponential(1 / 150.0, 6000))
    served = record_served(tmp_path / name, arrivals, STAGES, cores=2, seed=7, interpreter=interpreter_spec)
    return loadprobe.analyze([str(tmp_path / name)]), served


def test_the_queue_for_the_interpreter_bounds_capacity_and_adds_its_wait():
    engines = {"cpu": EngineCapacity("cpu", 4, None)}
    placements = [Placement("embed", "cpu", 1.0, 2.0, 1, 0.0, mean_ms=1.0)]
    free = estimate(placements, engines, rate=600.0)
    held = estimate(placements, engines, rate=600.0, interpreter=(1, 1.5))
    assert free.max_rps == pytest.approx(4000.0) and free.bottleneck == "cpu"
    assert held.max_rps == pytest.approx(1000.0 / 1.5) and held.bottleneck == INTERPRETER
    assert held.offered[INTERPRETER] == pytest.approx(600.0 * 1.5 / 1000.0)
    assert INTERPRETER not in held.utilisation  # it loads no engine, draws no power
    assert held.p50_ms > free.p50_ms and held.p95_ms > free.p95_ms  # 90% busy: requests wait for it
    assert held.interpreter_wait_ms[1] == pytest.approx(held.p95_ms - free.p95_ms, rel=0.5)
    two = estimate(placements, engines, rate=600.0, interpreter=(2, 1.5))
    assert two.max_rps == pytest.approx(2000.0 / 1.5) and two.p95_ms < held.p95_ms
    assert estimate(placements, engines, rate=700.0, interpreter=(1, 1.5)).p95_ms is None  # past it: saturated


@pytest.mark.parametrize("processes, share", [(1, 1.0), (1, 0.7), (2, 0.8), (3, 1.0), (1, 0.3)])
def test_the_recorded_processes_carry_what_their_interpreter_time_allows(tmp_path, processes, share):
    portrait, served = _portrait(tmp_path, (processes, share))
    python = interpreter(portrait)
    assert python.processes == processes
    # 150 req/s of ~2 ms: a light load's figure, and the plan says it may move at saturation.
    assert python.busy_pct < 50 and "record under a closed loop" in python.how
    assert python.ms == pytest.approx(share * served.work_ms, rel=0.03)
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    cores_bound = 2 * 1000.0 / served.work_ms
    want = min(cores_bound, processes * 1000.0 / (share * served.work_ms))
    assert plan.recommended.estimate.max_rps == pytest.approx(want, rel=0.05)
    assert (plan.recommended.estimate.bottleneck == INTERPRETER) == (want < cores_bound)
    assert any("Python interpreter" in note for note in plan.recommended.notes)
    rps, why = host_cpu_capacity(portrait)
    assert rps == pytest.approx(want, rel=0.05) and ("interpreter" in why) == (want < cores_bound)


def test_a_plan_that_moves_a_stage_off_the_host_takes_its_interpreter_time_with_it(tmp_path):
    portrait, served = _portrait(tmp_path, (1, 1.0))
    python = interpreter(portrait)
    assert python.cpu_work_ms == pytest.approx(served.work_ms, rel=0.03)  # the stage and the own work, as recorded
    own = python.cpu_work_ms - portrait.stage("embed").self_ms_mean
    processes, kept = python.for_plan(own)  # embed moved to an accelerator: the host keeps its own work
    assert processes == 1 and kept == pytest.approx(python.ms * own / python.cpu_work_ms)
    assert python.for_plan(python.cpu_work_ms) == (1, pytest.approx(python.ms))
    # At a rate one process cannot carry with every stage on the host, the planner sees the host saturated.
    plan = recommend(portrait, Constraints.parse(engines="cpu", min_rps=1.2 * python.max_rps))
    assert plan.recommended.estimate.p95_ms is None and plan.recommended.estimate.bottleneck == INTERPRETER
    assert "more worker processes" in " ".join(plan.recommended.notes)


def test_no_interpreter_samples_no_bound(tmp_path):
    portrait, served = _portrait(tmp_path, None)
    assert interpreter(portrait) is None
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    assert plan.recommended.estimate.max_rps == pytest.approx(2 * 1000.0 / served.work_ms, rel=0.05)


def test_a_recording_made_on_saturated_cores_is_planned_without_its_waits(tmp_path):
    """Issue #32: two worker processes whose BLAS threads fought over 2 cores recorded a 233 ms stage that
    takes 1 ms alone, and the plan said 3 req/s where the service had carried 150. When the CPU stages
    and own time asked more core time than the saturated cores gave, the excess was waiting: taken out,
    the recorded placement carries what the recording carried."""
    from loadprobe.plan.context import cpu_contention
    from loadprobe.portrait import DeviceMetric

    portrait, served = _portrait(tmp_path, None)
    assert cpu_contention(portrait) is None  # no CPU utilisation recorded: nothing says it was saturated
    duration = portrait.traffic.duration_s
    asked_s = served.work_ms * portrait.requests.count / 1000.0  # what the stages and own time held
    calm = list(portrait.devices.metrics)
    portrait.devices.metrics = calm + [DeviceMetric("host-a", "cpu", "util_pct", 60.0, 70.0, 80.0, int(duration))]
    assert cpu_contention(portrait) is None  # busy, not saturated
    # The same recording as if squeezed onto cores that gave a third of the time it held, fully busy.
    portrait.devices.metrics = calm + [DeviceMetric("host-a", "cpu", "util_pct", 100.0, 100.0, 100.0, int(duration))]
    portrait.traffic.duration_s = asked_s / 2 / 3
    found = cpu_contention(portrait)
    assert found.scale == pytest.approx(1 / 3, rel=0.05) and "saturated" in found.how
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    recorded_rps = portrait.requests.count / portrait.traffic.duration_s
    assert plan.recommended.estimate.max_rps == pytest.approx(recorded_rps, rel=0.05)
    assert any(note.startswith("CPU times: recorded while the host CPU was saturated")
               for note in plan.recommended.notes)
    embed = next(d for d in plan.recommended.decisions if d.stage == "embed")
    assert embed.service.mean_ms == pytest.approx(portrait.stage("embed").self_ms_mean * found.scale, rel=0.02)


def test_a_recording_made_with_the_interpreter_saturated_is_planned_without_its_lock_waits(tmp_path):
    """A FastAPI thread pool saturated by a closed loop: sixteen threads of one process queue for the
    interpreter lock inside a stage that releases it 100 times (a 0.5 ms stage recorded at 19 ms) while the
    two cores stand 37% idle; the plan said 101 req/s where the service had carried 382. Waiting for the
    lock is waiting, as for a core: the time the stages held beyond the CPU the process used is taken out."""
    from loadprobe.plan.context import cpu_contention
    from loadprobe.portrait import DeviceMetric

    portrait, served = _portrait(tmp_path, (1, 1.0))
    assert cpu_contention(portrait) is None  # its interpreter was not saturated
    requests = portrait.requests.count
    # The same recording as if the stages had held 3x the CPU its one process used, its interpreter 95% busy
    # and the host's cores far from saturated.
    duration = round(requests * served.work_ms / 3 / 1000.0 / 0.95)  # whole seconds, as samples count them
    scale = 0.95 * duration * 1000.0 / (requests * served.work_ms)  # about a third
    device = next(m.device for m in portrait.devices.metrics if m.device.startswith("interpreter:"))
    portrait.devices.metrics = [m for m in portrait.devices.metrics if m.metric != "cpu_pct"] + [
        DeviceMetric("host-a", device, "cpu_pct", 95.0, 99.0, 100.0, duration),
        DeviceMetric("host-a", "process", "cpu_pct", 95.0, 99.0, 100.0, duration),
        DeviceMetric("host-a", "cpu", "util_pct", 60.0, 65.0, 70.0, duration)]
    portrait.traffic.duration_s = duration
    found = cpu_contention(portrait)
    assert found.scale == pytest.approx(scale, rel=0.03) and "interpreter lock" in found.how
    assert interpreter(portrait).busy_pct == pytest.approx(95.0) and "closed loop" not in interpreter(portrait).how
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    recorded_rps = requests / duration
    assert plan.recommended.estimate.max_rps == pytest.approx(recorded_rps / 0.95, rel=0.05)
    assert plan.recommended.estimate.bottleneck == INTERPRETER
    assert any(note.startswith("CPU times: recorded while the Python interpreter was saturated")
               for note in plan.recommended.notes)
    embed = next(d for d in plan.recommended.decisions if d.stage == "embed")
    assert embed.service.mean_ms == pytest.approx(portrait.stage("embed").self_ms_mean * found.scale, rel=0.02)
    # Without run.json (an imported trace) the cores are inferred from these very CPU times: their
    # saturation is not judged (it once recursed), the lock's still is.
    portrait.data_quality.host_hardware = {}
    portrait.devices.metrics = [m if m.device != "cpu" else DeviceMetric("host-a", "cpu", "util_pct", 99.0, 100.0,
                                                                         100.0, m.seconds)
                                for m in portrait.devices.metrics]
    assert cpu_contention(portrait).scale == pytest.approx(found.scale)
    # Busy, not saturated: nothing is taken out.
    portrait.devices.metrics = [m if m.device != device else DeviceMetric("host-a", device, "cpu_pct", 70.0, 80.0,
                                                                          90.0, m.seconds)
                                for m in portrait.devices.metrics]
    assert cpu_contention(portrait) is None


def test_the_plan_file_carries_the_bound_and_simulate_says_when_a_schedule_passes_it(tmp_path):
    from loadprobe.pipeline import files as pipeline_files
    from loadprobe.simulator.compare import simulate_plans

    portrait, served = _portrait(tmp_path, (1, 1.0))
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    config = plan.to_pipeline()
    python = interpreter(portrait)
    assert config.interpreter.processes == 1
    assert config.interpreter.ms_per_request == pytest.approx(python.ms, rel=1e-3)
    assert pipeline_files.loads(pipeline_files.dump(config)).interpreter == config.interpreter  # survives the file
    for rate, past in ((0.5 * python.max_rps, False), (1.5 * python.max_rps, True)):
        offsets = np.cumsum(np.random.default_rng(1).exponential(1 / rate, 3000))
        comparison = simulate_plans([("kept", config)], offsets, source="test", arrivals=f"poisson {rate:.0f}/s")
        bound = comparison.to_dict()["interpreter"]["kept"]
        assert bound["max_rps"] == pytest.approx(python.max_rps, rel=1e-3)
        assert bound["share"] == pytest.approx(rate / python.max_rps, rel=0.1)
        assert ("past it" in comparison.render()) == past


def test_worker_processes_whose_native_pools_oversubscribe_the_cores_are_named_with_the_fix(tmp_path):
    """Issue #32: two uvicorn workers, each with a 2-thread OpenBLAS pool, on 2 cores served a tenth of what one
    worker did, and the recording's stage times held the pools' fight. Each process samples how many native
    threads were busy beside its Python; when the workers' threads outnumber the cores the plan says so and
    how many threads each process should get."""
    from loadprobe.plan.context import native_pools
    from loadprobe.portrait import DeviceMetric

    def with_pools(portrait, threads):
        seconds = int(portrait.traffic.duration_s)
        workers = sorted({m.device for m in portrait.devices.metrics if m.device.startswith("interpreter:")})
        portrait.devices.metrics = [m for m in portrait.devices.metrics if m.metric != "native_threads"] + [
            DeviceMetric("host-a", w, "native_threads", threads * 0.6, threads, threads, seconds) for w in workers]
        return portrait

    two, _ = _portrait(tmp_path, (2, 0.5), name="two")
    assert native_pools(with_pools(two, 0)) is None  # no native pool: nothing to say
    found = native_pools(with_pools(two, 1))
    assert found is not None and "2 worker processes" in found and "4 threads for 2 cores" in found
    assert "OMP_NUM_THREADS=1" in found
    plan = recommend(two, Constraints.parse(engines="cpu"))
    assert f"CPU threads: {found}" in plan.recommended.notes
    one, _ = _portrait(tmp_path, (1, 0.5), name="one")
    assert native_pools(with_pools(one, 1)) is None  # one process and its pool: as many threads as cores


def test_cpu_spent_before_the_first_request_is_no_request_s_work(tmp_path):
    """A model loading for 2 s at full CPU before the traffic starts, then 300 requests: the interpreter's CPU per
    request is the serving's (it read 5x that when the loading counted), and the plan's bound follows."""
    import time

    from loadprobe import probe, request

    loadprobe.start(tmp_path / "data", service="warm", sample_devices=False, flush_interval_s=0.2)
    try:
        until = time.monotonic() + 2.0
        while time.monotonic() < until:  # "loading the model": pure Python, the interpreter busy
            sum(range(10_000))
        served = time.thread_time()
        for _ in range(300):
            with request():
                with probe("model"):
                    sum(range(60_000))
            time.sleep(0.01)
        served = (time.thread_time() - served) * 1000.0 / 300  # ms of this thread's CPU per request
    finally:
        loadprobe.stop()
    python = interpreter(loadprobe.analyze([str(tmp_path / "data")]))
    # The recorder's own threads add a little; the loading would have added ~7 ms per request.
    assert 0.7 * served < python.ms < 2.0 * served


def test_a_request_s_cpu_after_the_last_arrival_is_counted(tmp_path):
    """The CPU samples count to the end of the last request, not to its arrival: one 2.5 s request read as 1 s."""
    import time

    from loadprobe import request

    loadprobe.start(tmp_path / "data", service="long", sample_devices=False, flush_interval_s=0.2)
    try:
        time.sleep(1.5)  # idle seconds sampled before it: the arrival's second alone read as idle
        with request():
            until = time.monotonic() + 2.5
            while time.monotonic() < until:
                sum(range(10_000))
    finally:
        loadprobe.stop()
    python = interpreter(loadprobe.analyze([str(tmp_path / "data")]))
    assert 0.7 * 2500 < python.ms < 2.0 * 2500  # the edge seconds are taken at the inner seconds' rate
