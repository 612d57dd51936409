"""The host CPU's power, in its lookup order: the user's figure, RAPL, the catalog entry for the recorded CPU
model, a stated per-core assumption -- from real recordings, whose run.json says what the host is."""

from __future__ import annotations

import json
import time

import pytest

import loadprobe
from loadprobe import record_span, request
from loadprobe._errors import LoadprobeError
from loadprobe.catalog import load_catalog
from loadprobe.estimate.hostpower import ASSUMED_DEVICE, ASSUMED_THREADS, host_cpu_power
from loadprobe.portrait import DeviceMetric

from ..conftest import REPO


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.fixture(scope="module")
def sample():
    return loadprobe.analyze([str(REPO / "samples" / "data" / "vision")])


def recorded(tmp_path, *, cpu_model, logical_cores=8):
    """A short real recording whose run.json names ``cpu_model`` (None: says none) and core count, analysed."""
    loadprobe.start(tmp_path / "data", service="host", sample_devices=False, flush_interval_s=0.05)
    for i in range(5):
        with request(id=f"r{i}"):
            t = time.perf_counter_ns()
            record_span("decode", t, t + 1_000_000, engine="cpu")
    loadprobe.stop()
    for run_json in (tmp_path / "data").rglob("run.json"):
        info = json.loads(run_json.read_text())
        info["hardware"]["cpu"].update(model=cpu_model, logical_cores=logical_cores)
        run_json.write_text(json.dumps(info))
    return loadprobe.analyze([str(tmp_path / "data")])


def test_catalog_entry_for_the_recorded_cpu_model(tmp_path, catalog):
    portrait = recorded(tmp_path, cpu_model="AMD EPYC 9654 96-Core Processor")
    assert portrait.data_quality.host_hardware  # run.json's hardware reached the portrait
    power = host_cpu_power(portrait, catalog)
    assert (power.watts, power.basis, power.device) == (360, "catalog", "amd-epyc-9654")
    assert "360 W, the TDP of amd-epyc-9654" in power.note and "--cpu-power-w" in power.note


def test_an_unknown_model_gets_the_stated_per_core_assumption(tmp_path, catalog):
    portrait = recorded(tmp_path, cpu_model="AMD EPYC", logical_cores=8)
    power = host_cpu_power(portrait, catalog)
    per_core = catalog.get(ASSUMED_DEVICE).tdp_w / ASSUMED_THREADS  # 350 W / 112 threads
    assert power.basis == "assumed" and power.watts == pytest.approx(8 * per_core) == pytest.approx(25)
    assert "8 logical cores x 3.12 W" in power.note and "'AMD EPYC' not in the catalog" in power.note
    assert "--cpu-power-w" in power.note


def test_nothing_known_is_said_to_be_unknown_not_zero(tmp_path, catalog):
    portrait = recorded(tmp_path, cpu_model=None, logical_cores=None)
    power = host_cpu_power(portrait, catalog)
    assert power.watts is None and power.basis == "unknown" and "give --cpu-power-w" in power.note


def test_rapl_wins_over_the_catalog_and_the_users_figure_over_both(tmp_path, catalog):
    portrait = recorded(tmp_path, cpu_model="Intel(R) Xeon(R) Platinum 8480+")
    assert host_cpu_power(portrait, catalog).basis == "catalog"
    # what the analysis makes of RAPL samples: the cpu's power_w per host
    portrait.devices.metrics.append(DeviceMetric(host="vm", device="cpu", metric="power_w", mean=120.0, p95=180.0,
                                                 max=210.0, seconds=30))
    power = host_cpu_power(portrait, catalog)
    assert (power.watts, power.mean_w, power.basis) == (210.0, 120.0, "rapl") and "RAPL" in power.note
    given = host_cpu_power(portrait, catalog, cpu_power_w=280)
    assert (given.watts, given.basis) == (280, "given") and "as given (--cpu-power-w)" in given.note


@pytest.mark.parametrize("bad", [0, -5, float("nan"), True, "200"])
def test_a_bad_user_figure_names_the_option(sample, catalog, bad):
    with pytest.raises(LoadprobeError, match=r"^--cpu-power-w must be a number of watts above 0; got "):
        host_cpu_power(sample, catalog, cpu_power_w=bad)


def test_the_committed_sample_recording(sample, catalog):
    # run.json of the vision sample: "AMD EPYC" with 2 logical cores, and no RAPL on that machine
    power = host_cpu_power(sample, catalog)
    assert power.basis == "assumed" and power.watts == pytest.approx(2 * 350 / 112)
