"""The NVML path on a real NVIDIA GPU; skipped where no driver answers (it runs on the GPU machine)."""

from __future__ import annotations

import time

import pytest

import loadprobe
from loadprobe.record.samplers import NvmlSource

from ..conftest import samples_in

nvml = NvmlSource()
pytestmark = pytest.mark.skipif(not nvml.availability()["available"], reason="no NVIDIA driver here")


def test_nvml_reads_every_gpu_metric_in_range():
    readings = {(d, m): v for d, m, v in nvml.read()}
    assert 0 <= readings[("gpu0", "util_pct")] <= 100
    assert 0 < readings[("gpu0", "mem_used_bytes")] <= readings[("gpu0", "mem_total_bytes")]
    assert readings.get(("gpu0", "power_w"), 1.0) > 0
    assert ("gpu0", "temp_c") in readings
    (gpu,) = nvml.inventory()[:1]
    assert gpu["name"] and gpu["memory_bytes"] > 0


def test_a_recorder_samples_the_gpu_and_lists_it_in_run_json(tmp_path):
    rec = loadprobe.start(tmp_path, sample_interval_s=0.05)
    time.sleep(0.3)
    loadprobe.stop()
    assert {"gpu0"} <= {s["device"] for s in samples_in(rec.run_dir)}
    assert rec.run_info()["hardware"]["gpus"][0]["device"] == "gpu0"


def test_nvml_energy_counter_advances_with_the_board(tmp_path):
    """Volta and later boards count their energy: two reads apart give a positive ``energy_j``."""
    source = NvmlSource()
    source.read()
    time.sleep(0.2)
    energy = [v for d, m, v in source.read() if d == "gpu0" and m == "energy_j"]
    if not energy:
        pytest.skip("this board has no total-energy counter (before Volta)")
    assert energy[0] > 0
