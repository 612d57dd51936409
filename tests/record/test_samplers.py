"""Device samplers read real counters; absent hardware is reported, never raised."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from loadprobe.record.samplers import NvmlSource, PsutilSource, RaplSource, Sampler


def test_psutil_readings_are_in_range():
    source = PsutilSource()
    sum(i * i for i in range(200_000))  # give the CPU something to measure
    readings = {(d, m): v for d, m, v in source.read()}
    assert 0.0 <= readings[("cpu", "util_pct")] <= 100.0
    assert readings[("process", "rss_bytes")] > 1_000_000
    assert readings[("memory", "used_bytes")] > 0
    second = {(d, m) for d, m, _ in source.read()}
    assert ("disk", "read_bps") in second or ("net", "rx_bps") in second  # rates need two readings


def test_psutil_follows_a_process_tree():
    source = PsutilSource([os.getppid()], include_children=True)
    source.read()
    readings = {(d, m): v for d, m, v in source.read()}
    assert readings[("process", "rss_bytes")] > 0 and readings[("process", "threads")] >= 2


def test_nvml_absent_is_unavailable_with_a_reason():
    source = NvmlSource()
    availability = source.availability()
    if availability["available"]:
        pytest.skip("a GPU driver is present here; the NVML path is checked by tests/record/test_gpu.py")
    assert availability["reason"]
    assert source.read() == [] and source.inventory() == []


def _powercap(tmp_path, energy_uj, wrap=1_000_000):
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir(exist_ok=True)
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{wrap}\n")
    return zone


def test_rapl_power_from_energy_deltas_including_wraparound(tmp_path, monkeypatch):
    clock = iter([100.0, 102.0, 104.0])
    monkeypatch.setattr("loadprobe.record.samplers.time.monotonic", lambda: next(clock))
    zone = _powercap(tmp_path, 0)
    source = RaplSource(str(tmp_path))
    assert source.availability() == {"available": True, "packages": 1}
    assert source.read() == []  # a rate needs two readings
    (zone / "energy_uj").write_text("900000\n")
    assert source.read() == [("cpu", "power_w", pytest.approx(0.45)), ("cpu", "energy_j", pytest.approx(0.9))]
    (zone / "energy_uj").write_text("100000\n")  # wrapped at 1 J: 0.2 J more
    assert source.read() == [("cpu", "power_w", pytest.approx(0.1)), ("cpu", "energy_j", pytest.approx(0.2))]


def test_rapl_unreadable_or_missing_is_unavailable(tmp_path):
    assert RaplSource(str(tmp_path / "none")).availability()["available"] is False
    zone = _powercap(tmp_path, 0)
    (zone / "energy_uj").write_text("not a number")
    availability = RaplSource(str(tmp_path)).availability()
    assert availability["available"] is False and "energy_uj" in availability["reason"]


class _Broken:
    name = "broken"

    def availability(self):
        return {"available": True}

    def read(self):
        raise RuntimeError("sensor fell off")


class _Counting:
    name = "counting"

    def __init__(self):
        self.n = 0

    def availability(self):
        return {"available": True}

    def read(self):
        self.n += 1
        return [("fake0", "n", self.n)]


def test_a_failing_source_is_counted_and_the_others_keep_sampling(caplog):
    counting = _Counting()
    sampler = Sampler([_Broken(), counting], interval_s=0.01)
    with caplog.at_level(logging.WARNING, logger="loadprobe"):
        for _ in range(5):
            sampler.sample_once()
    assert sampler.errors == 5
    assert [r[3] for r in sampler.drain()] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert caplog.text.count("sensor fell off") == 1


def test_sampler_memory_is_bounded_when_nobody_drains():
    sampler = Sampler([_Counting()], interval_s=0.01, max_rows=3)
    for _ in range(10):
        sampler.sample_once()
    assert len(sampler.rows) == 3 and sampler.dropped == 7


def test_nvml_energy_counter_becomes_joules_per_interval(monkeypatch):
    """The NVML path without a GPU: a stand-in ``pynvml`` module (the driver boundary) whose total-energy
    counter (mJ) advances; a board without the counter is asked once and then no more."""
    import types

    counter = {"mj": 1_000_000}
    calls = []

    class NVMLError(Exception):
        pass

    def total_energy(handle):
        calls.append(handle)
        if handle == "old-board":
            raise NVMLError("not supported")
        return counter["mj"]

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: ["new-board", "old-board"][i],
        nvmlDeviceGetTotalEnergyConsumption=total_energy, nvmlSystemGetDriverVersion=lambda: "test",
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=0)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    source = NvmlSource()
    assert source.availability()["available"] is True
    first = [r for r in source.read() if r[1] == "energy_j"]
    assert first == []  # a delta needs two readings
    counter["mj"] += 2_500  # 2.5 J
    assert [r for r in source.read() if r[1] == "energy_j"] == [("gpu0", "energy_j", 2.5)]
    assert calls.count("old-board") == 1  # refused once: not asked again


def test_interpreter_counts_the_python_threads_not_the_recorders():
    """A Python thread busy for a while reads ~100% of a core, even when it ended before the reading; the
    same work on a thread named as the recorder's own is left out; idle reads ~0 (issue #32: a worker
    process's interpreter bound)."""
    from loadprobe.record.samplers import RECORDER_THREADS, InterpreterSource

    source = InterpreterSource()
    assert source.availability() == {"available": True}
    assert source.device == f"interpreter:{os.getpid()}"

    def spin(stop):
        while not stop.is_set():
            sum(range(1000))

    def busy(name: str, read_while_running: bool) -> float:
        stop = threading.Event()
        worker = threading.Thread(target=spin, args=(stop,), name=name)
        worker.start()
        source.read()  # from here on, with the thread seen
        time.sleep(0.6)
        if read_while_running:
            (device, metric, value), *_ = source.read()
        stop.set()
        worker.join()
        if not read_while_running:
            (device, metric, value), *_ = source.read()
        assert (device, metric) == (source.device, "cpu_pct")
        return value

    # This thread sleeps meanwhile; the spinning one runs as much as the host gives it (it may share a core).
    assert busy("service-work", True) > 40.0
    assert busy("service-work", False) > 40.0
    assert busy(RECORDER_THREADS[0], True) < 10.0
    source.read()  # a window of its own: what the threads above did before they ended is not in it
    time.sleep(0.3)
    assert source.read()[0][2] < 10.0


def test_interpreter_counts_the_busy_native_threads_beside_the_python():
    """A BLAS pool's helper threads run no Python: they are left out of the interpreter's CPU and counted as
    busy native threads, which the planner reads to warn of worker processes oversubscribing the cores."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numpy as np

    from loadprobe.record.samplers import InterpreterSource

    blas = [p for p in threadpoolctl.threadpool_info() if p.get("user_api") == "blas"]
    if not blas or blas[0]["num_threads"] < 2:
        pytest.skip("numpy's BLAS runs one thread here: no native pool to see")
    source = InterpreterSource()

    def python_only(stop):
        while not stop.is_set():
            sum(range(1000))

    def matmul(stop):
        a = np.random.default_rng(0).standard_normal((384, 384))
        while not stop.is_set():
            a @ a

    readings = {}
    for name, work in (("python", python_only), ("blas", matmul)):
        stop = threading.Event()
        worker = threading.Thread(target=work, args=(stop,))
        worker.start()
        source.read()
        time.sleep(0.6)
        readings[name] = {metric: value for _, metric, value in source.read()}
        stop.set()
        worker.join()
    assert readings["python"]["native_threads"] == 0 and readings["python"]["native_cpu_pct"] < 5.0
    assert readings["blas"]["native_threads"] >= 1 and readings["blas"]["native_cpu_pct"] > 10.0


def test_psutil_reads_cpu_steal_apart_from_utilisation(monkeypatch):
    """A virtual machine's stolen time (the hypervisor running other guests) counts as busy -- this guest could
    not run then -- and is read apart as ``steal_pct``, which analysis warns of."""
    import psutil

    fields = psutil.cpu_times()._fields
    if "steal" not in fields:
        pytest.skip("this kernel counts no steal")
    real = PsutilSource()
    time.sleep(0.05)
    real = {(d, m): v for d, m, v in real.read()}
    assert 0.0 <= real[("cpu", "steal_pct")] <= 100.0
    times = type(psutil.cpu_times())
    source = PsutilSource()
    counters = dict.fromkeys(fields, 0.0)
    readings = []
    for user, idle, steal in ((10.0, 10.0, 0.0), (13.0, 15.0, 2.0)):  # 10 s: 3 working, 5 idle, 2 stolen
        counters.update(user=user, idle=idle, steal=steal, iowait=0.0)
        monkeypatch.setattr(psutil, "cpu_times", lambda c=dict(counters): times(**c))
        readings.append({(d, m): v for d, m, v in source.read()})
    assert readings[1][("cpu", "util_pct")] == pytest.approx(50.0)
    assert readings[1][("cpu", "steal_pct")] == pytest.approx(20.0)
