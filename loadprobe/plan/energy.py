"""Measured energy in the plan: the recording's per-stage energy where the engine is the device it was measured on.

Without it the planner prices power from the catalog: a unit's maximum power times the time an
item takes (rule 5), and a mean power of 30% idle plus the rest in proportion to utilisation.
Where the portrait measured a stage's energy (docs/metrics.md#energy) on the very device an
engine is -- the host CPU for a CPU engine that names no device, the recorded GPU or NPU model
for one that does -- the measured figures replace those: the device's own idle power, and the
stage's measured active energy, scaled by how much longer or shorter an item takes in the plan
(another batch size) than it did recorded.

Usage (``placement`` and ``sizing`` do this)::

    found = measured_stage(ctx, stage, spec, device)   # None: not measured on this device
    found.item_j(per_item_s), found.idle_w, found.request_j(per_item_s)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..estimate.servicetime import StageProfile
from ..schema import engine_kind
from .context import recorded_kind

__all__ = ["MeasuredStage", "measured_stage"]


@dataclass(frozen=True)
class MeasuredStage:
    """A stage's measured energy on one device, as the plan reuses it."""

    active_item_j: float  # active energy per item, as recorded
    active_request_j: float  # ... per request that arrived
    recorded_item_s: float  # the time an item took as recorded (its execution over its batch)
    idle_w: float  # the device's idle power (0 when the recording could not tell it)
    device: str  # "host/device" it was measured on

    def scale(self, per_item_s: float) -> float:
        return per_item_s / self.recorded_item_s if self.recorded_item_s > 0 else 1.0

    def item_j(self, per_item_s: float) -> float:
        """One item's energy taking ``per_item_s``: its active energy and the device's idle power meanwhile."""
        return self.active_item_j * self.scale(per_item_s) + self.idle_w * per_item_s

    def request_j(self, per_item_s: float) -> float:
        """The active energy one arriving request spends in the stage, items taking ``per_item_s``."""
        return self.active_request_j * self.scale(per_item_s)

    def basis(self) -> str:
        return (f"measured on {self.device}: {1000 * self.active_item_j:.3g} mJ active per item recorded, "
                f"idle {self.idle_w:.3g} W")


def measured_stage(ctx, stage_name: str, spec, device) -> MeasuredStage | None:
    """The stage's measured energy if the engine ``spec`` (on catalog ``device``) is the device it was measured on."""
    portrait = ctx.portrait
    energy = getattr(portrait, "energy", None)
    stage = portrait.stage(stage_name)
    if energy is None or stage is None or stage.energy_per_item_j is None or stage.energy_per_request_j is None:
        return None
    if not _same_device(ctx, stage, spec, device):
        return None
    found = [(key, d) for key, d in sorted(energy.devices.items())
             if d.attributed_j.get(stage_name) and engine_kind(key.split("/", 1)[1]) == spec.kind]
    if not found:
        return None
    key, measured = max(found, key=lambda kd: kd[1].attributed_j[stage_name])
    profile = StageProfile.of(stage)
    return MeasuredStage(active_item_j=stage.energy_per_item_j.mean, active_request_j=stage.energy_per_request_j.mean,
                         recorded_item_s=profile.p50_ms / 1000.0 / max(1.0, profile.batch_mean),
                         idle_w=measured.idle_w or 0.0, device=key)


def _same_device(ctx, stage, spec, device) -> bool:
    """Whether the engine is the device the stage was recorded on: the host CPU, or the same catalog model."""
    if spec.kind != recorded_kind(stage):
        return False
    if spec.kind == "cpu" and not spec.device:
        return True
    recorded = ctx.catalog.find(ctx.portrait.roofline_device)
    return recorded is not None and device is not None and recorded.id == device.id
