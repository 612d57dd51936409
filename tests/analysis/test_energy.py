"""Energy attribution (issue #23) on recordings whose device power follows a known model.

The GPU is not here, so it is simulated at the sampler boundary only (tests/support/energy.py:
a source with the NVML one's interface). Everything else is real: the recorder and its sampler
thread, spans from ``probe`` and ``record_span`` (a dynamic batcher in its own thread, recording
one span per member as the Router does), Parquet on disk and ``loadprobe.analyze``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import loadprobe

from ..support.energy import ACTIVE_W, IDLE_W, record

@pytest.mark.timeout(120)
@pytest.mark.parametrize("phases, counter, idle_from", [
    ([(2.5, 0), (3.0, 200), (3.0, 0), (3.0, 100)], True, "seconds without work"),
    ([(2.0, 250), (2.0, 50), (2.0, 200), (2.0, 40)], True, "intercept of power against busy time"),  # never idle
    ([(2.5, 0), (3.0, 200), (3.0, 0), (3.0, 100)], False, "seconds without work"),
], ids=["idle-seconds", "always-busy", "power-readings-only"])
def test_idle_power_energy_per_item_and_conservation_are_recovered(tmp_path, monkeypatch, phases, counter,
                                                                   idle_from):
    _, gpu, batcher = record(tmp_path, monkeypatch, phases, counter)
    portrait = loadprobe.analyze([tmp_path / "data"])
    (key,) = [k for k in portrait.energy.devices if k.endswith("/gpu0")]
    device = portrait.energy.devices[key]
    assert device.source == ("energy counter" if counter else "power samples")
    assert device.idle_from == idle_from
    assert device.idle_w == pytest.approx(IDLE_W, rel=0.10), device
    parts = device.idle_j + sum(device.attributed_j.values()) + device.unattributed_j
    assert parts == pytest.approx(device.measured_j, rel=0.01)
    assert set(device.attributed_j) == {"backbone"}  # decode and head ran on the CPU, whose power is not sampled

    backbone = portrait.stage("backbone")
    assert backbone.batch.mean > 1.5  # the batcher did batch: the per-item split is what is tested
    # The truth: the device's active power over its executions, shared by their items.
    true_per_item = ACTIVE_W * gpu.active_s / batcher.items
    per_item = backbone.energy_per_item_j
    assert per_item.mean == pytest.approx(true_per_item, rel=0.10), (per_item, true_per_item)
    assert per_item.lo <= per_item.mean <= per_item.hi and per_item.lo < per_item.hi
    assert per_item.lo <= true_per_item <= per_item.hi
    per_request = backbone.energy_per_request_j
    assert per_request.lo <= per_request.mean <= per_request.hi
    assert portrait.energy.request_j.mean == pytest.approx(backbone.energy_per_request_j.mean)
    assert portrait.stage("decode").energy_per_item_j is None



def test_without_power_samples_there_is_no_energy_section(tmp_path):
    loadprobe.start(tmp_path / "data", sample_devices=False)
    with loadprobe.request(), loadprobe.probe("decode", engine="cpu"):
        time.sleep(0.001)
    loadprobe.stop()
    portrait = loadprobe.analyze([tmp_path / "data"])
    assert portrait.energy is None and portrait.stage("decode").energy_per_item_j is None


def test_energy_is_read_back_from_portrait_json(tmp_path, monkeypatch):
    record(tmp_path, monkeypatch, [(1.2, 0), (1.5, 100)])
    portrait = loadprobe.analyze([tmp_path / "data"])
    again = loadprobe.Portrait.from_dict(portrait.to_dict())
    assert again.energy == loadprobe.Portrait.from_dict(again.to_dict()).energy
    assert again.stage("backbone").energy_per_item_j.mean == pytest.approx(
        portrait.stage("backbone").energy_per_item_j.mean, rel=1e-6)
    assert np.isfinite(again.energy.request_j.hi)


# -- engine names resolve to the sampled device (issue #31 point 2) ------------------------------------------


@pytest.mark.parametrize("engine, sampled, device", [
    ("gpu0", {"gpu0"}, "gpu0"), ("GPU1", {"gpu0", "gpu1"}, "gpu1"), ("cuda:1", {"gpu1"}, "gpu1"),
    ("cuda", {"cpu", "gpu2"}, "gpu2"), ("gpu", {"gpu3"}, "gpu3"), ("gpu", {"gpu0", "gpu1"}, "gpu0"),
    ("cuda:0", {"gpu3"}, "gpu3"),  # a process that sees one GPU as cuda:0 on a host sampled as gpu3
    ("gpu1", {"gpu0", "gpu2"}, "gpu1"),  # two others sampled: no guess, its own name (unsampled)
    ("npu_0", {"npu0"}, "npu0"), ("gpu-a100", {"gpu0"}, "gpu0"), ("host", {"cpu"}, "cpu"), ("onnx", set(), "cpu"),
])
def test_engine_names_resolve_to_the_sampled_device(engine, sampled, device):
    from loadprobe.schema import engine_device, engine_kind

    assert engine_device(engine, sampled) == device
    assert engine_kind(engine) == engine_kind(device)


def _record_root_spans(tmp_path, monkeypatch, engine: str, gpu_device: str = "gpu0"):
    """``@probe("model", engine=engine, batch=...)`` called outside any request, on a simulated GPU
    sampled as ``gpu_device``: idle for 2.5 s, then 2 s of executions."""
    from loadprobe.record import samplers

    from ..support.energy import SimulatedGpu

    gpu = SimulatedGpu(True, gpu_device)
    monkeypatch.setattr(samplers, "default_sources", lambda *a, **k: [gpu])
    loadprobe.start(tmp_path / "data", service="model", sample_interval_s=0.1)

    @loadprobe.probe("model", engine=engine, batch=lambda b: b)
    def model(b):
        with gpu.running():
            time.sleep(0.003)

    time.sleep(2.5)
    end = time.perf_counter() + 2.0
    while time.perf_counter() < end:
        model(2)
        time.sleep(0.004)
    loadprobe.stop()
    return gpu


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ["gpu0", "gpu", "cuda:0", "cuda"])
def test_root_spans_on_any_name_of_the_gpu_get_its_energy(tmp_path, monkeypatch, engine):
    """The crash reported: spans on ``gpu0`` outside any request, with ``gpu0`` power readings."""
    from click.testing import CliRunner

    from loadprobe.cli import main

    gpu = _record_root_spans(tmp_path, monkeypatch, engine)
    done = CliRunner().invoke(main, ["analyze", str(tmp_path / "data"), "-o", str(tmp_path / "report"), "--no-html"])
    assert done.exit_code == 0, done.output
    portrait = loadprobe.Portrait.load(tmp_path / "report" / "portrait.json")
    (device,) = [d for k, d in portrait.energy.devices.items() if k.endswith("/gpu0")]
    assert device.idle_w == pytest.approx(IDLE_W, rel=0.10)
    parts = device.idle_j + sum(device.attributed_j.values()) + device.unattributed_j
    assert parts == pytest.approx(device.measured_j, rel=0.01)
    assert set(device.attributed_j) == {"model"}
    # most active energy is the model's: the rest is the sampler's edges and the gaps between calls
    assert device.attributed_j["model"] == pytest.approx(ACTIVE_W * gpu.active_s, rel=0.15)
    assert portrait.stage("model").energy_per_item_j is not None


@pytest.mark.timeout(60)
def test_a_device_with_readings_but_no_executions_is_idle_plus_unattributed(tmp_path, monkeypatch):
    _record_root_spans(tmp_path, monkeypatch, "cpu")  # the work is said to run on the CPU, which is not sampled
    portrait = loadprobe.analyze([tmp_path / "data"])
    (device,) = [d for k, d in portrait.energy.devices.items() if k.endswith("/gpu0")]
    assert device.attributed_j == {}
    assert device.idle_j + device.unattributed_j == pytest.approx(device.measured_j, rel=0.01)
    assert device.unattributed_j > 0  # the GPU did run: its active energy is there, said to be nobody's
