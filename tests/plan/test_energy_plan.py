"""The planner uses the energy measured per stage where the engine is the device it was measured on (issue #23.3)."""

from __future__ import annotations

import pytest

import loadprobe
from loadprobe.plan.constraints import Constraints
from loadprobe.plan.planner import recommend

from ..support.energy import record


@pytest.mark.timeout(120)
def test_a_plan_on_the_measured_device_draws_what_was_measured(tmp_path, monkeypatch):
    record(tmp_path, monkeypatch, [(2.5, 0), (3.0, 150)], device="cpu")  # the host CPU's package power, sampled
    portrait = loadprobe.analyze([tmp_path / "data"])
    device = next(d for k, d in portrait.energy.devices.items() if k.endswith("/cpu"))
    assert set(device.attributed_j) == {"decode", "backbone", "head"}

    plan = recommend(portrait, Constraints.parse(engines="cpu", min_rps=100, cpu_power_w=65), cpu_cores=2)
    rec = plan.recommended
    cpu = rec.engines["cpu"]
    # Idle power plus each stage's measured active energy per request at the rate (its items' time as planned).
    assert cpu["measured_w"] is not None and cpu["measured_w"] >= device.idle_w
    assert rec.estimate.power_w == pytest.approx(cpu["measured_w"])
    assert rec.estimate.energy_per_request_j == pytest.approx(cpu["measured_w"] / 100)
    assert any("from the energy measured" in n for n in rec.notes)
    # Provisioned power stays the maximum (65 W given), whatever was measured.
    assert rec.provisioned_w == pytest.approx(65 * rec.engines["cpu"]["count"])
    assert rec.tco["power_unknown"] == []


@pytest.mark.timeout(120)
def test_another_device_than_the_measured_one_keeps_the_catalog_figures(tmp_path, monkeypatch):
    record(tmp_path, monkeypatch, [(2.5, 0), (3.0, 150)], device="gpu0")  # a GPU the catalog does not know
    portrait = loadprobe.analyze([tmp_path / "data"])
    assert portrait.stage("backbone").energy_per_item_j is not None
    plan = recommend(portrait, Constraints.parse(engines="cpu,gpu:nvidia-l4", min_rps=100, cpu_power_w=65),
                     cpu_cores=2)
    for option in [plan.recommended, *plan.alternatives]:
        assert all(e["measured_w"] is None for e in option.engines.values()), option.name
        assert not any("from the energy measured" in n for n in option.notes)
