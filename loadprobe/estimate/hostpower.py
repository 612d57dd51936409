"""The host CPU's power: given by the user, else measured (RAPL), else the catalog's figure for the recorded CPU
model, else a stated per-core assumption -- never a silent zero.

    from loadprobe.catalog import load_catalog
    from loadprobe.estimate.hostpower import host_cpu_power

    catalog = load_catalog()
    power = host_cpu_power(portrait, catalog)                   # HostCpuPower(watts=..., basis="rapl", ...)
    power = host_cpu_power(portrait, catalog, cpu_power_w=280)  # the user's figure wins (--cpu-power-w)
    power.watts, power.basis, power.note              # the figure, where it came from, the line for the plan's notes

``watts`` is the host CPU's maximum (provisioned) power: the most RAPL recorded in any second, the
catalog entry's TDP, or the assumption below times the recorded logical cores. ``mean_w`` is the
recorded mean where RAPL ran, else None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._errors import LoadprobeError

__all__ = ["ASSUMED_DEVICE", "ASSUMED_THREADS", "HostCpuPower", "host_cpu_power"]

# The assumption when neither RAPL nor the catalog knows the host CPU: the TDP per hardware thread of a
# catalogued server CPU, the Intel Xeon Platinum 8480+ (350 W TDP over 56 cores x 2 threads = 112 threads,
# Intel ark: https://www.intel.com/content/www/us/en/products/sku/231746/intel-xeon-platinum-8480-processor-105m-
# cache-2-00-ghz/specifications.html, "Total Threads 112"), i.e. 3.125 W per logical core.
ASSUMED_DEVICE = "intel-xeon-8480"
ASSUMED_THREADS = 112


@dataclass(frozen=True)
class HostCpuPower:
    """The host CPU's power figure and where it came from.

    ``basis``: "given" (the user's figure), "rapl" (measured), "catalog" (the matched entry's TDP),
    "assumed" (per logical core, see ``ASSUMED_DEVICE``) or "unknown" (``watts`` is None).
    """

    watts: float | None
    basis: str
    note: str
    mean_w: float | None = None
    device: str | None = None  # the catalog id matched or assumed from


def host_cpu_power(portrait, catalog, *, cpu_power_w: float | None = None) -> HostCpuPower:
    """The host CPU's maximum power, in this order: ``cpu_power_w`` (the user's), RAPL as recorded, the catalog
    entry matching the recorded CPU model, an assumption per logical core; "unknown" only when the recording
    says neither the model nor the core count. A bad ``cpu_power_w`` raises LoadprobeError naming it."""
    if cpu_power_w is not None:
        if isinstance(cpu_power_w, bool) or not isinstance(cpu_power_w, (int, float)) \
                or not math.isfinite(cpu_power_w) or cpu_power_w <= 0:
            raise LoadprobeError(f"--cpu-power-w must be a number of watts above 0; got {cpu_power_w!r}")
        return HostCpuPower(float(cpu_power_w), "given",
                            f"host CPU power: {cpu_power_w:g} W, as given (--cpu-power-w)")

    rapl = [m for m in (getattr(getattr(portrait, "devices", None), "metrics", None) or [])
            if m.device == "cpu" and m.metric == "power_w"]
    if rapl:
        peak, mean = max(m.max for m in rapl), sum(m.mean for m in rapl)
        hosts = len({m.host for m in rapl})
        where = f"the most any host drew in a second over {sum(m.seconds for m in rapl)} sampled seconds"
        return HostCpuPower(peak, "rapl", f"host CPU power: {peak:.0f} W measured by RAPL ({where}, {hosts} "
                                          f"host{'s' * (hosts != 1)}; mean {mean:.0f} W)", mean_w=mean)

    hardware = getattr(getattr(portrait, "data_quality", None), "host_hardware", None) or {}
    models = [h.get("cpu_model") for h in hardware.values() if isinstance(h.get("cpu_model"), str)]
    for model in models:
        device = catalog.match(model)
        if device is not None and device.kind == "cpu" and device.tdp_w is not None:
            return HostCpuPower(device.tdp_w, "catalog",
                                f"host CPU power: {device.tdp_w:g} W, the TDP of {device.id} matching the recorded "
                                f"CPU {model!r} (one socket assumed; no RAPL reading); override with --cpu-power-w",
                                device=device.id)

    cores = [h.get("logical_cores") for h in hardware.values()
             if isinstance(h.get("logical_cores"), int) and not isinstance(h.get("logical_cores"), bool)
             and h.get("logical_cores") > 0]
    model = f"CPU {models[0]!r} not in the catalog" if models else "no CPU model recorded"
    reference = catalog.find(ASSUMED_DEVICE)
    if cores and reference is not None and reference.tdp_w is not None:
        per_core = reference.tdp_w / ASSUMED_THREADS
        watts = per_core * min(cores)
        return HostCpuPower(watts, "assumed",
                            f"host CPU power: {watts:.0f} W assumed = {min(cores)} logical cores x {per_core:.3g} W "
                            f"({reference.name}: {reference.tdp_w:g} W TDP over {ASSUMED_THREADS} threads); no RAPL "
                            f"reading, {model}; override with --cpu-power-w", device=ASSUMED_DEVICE)
    return HostCpuPower(None, "unknown", f"host CPU power unknown: no RAPL reading, {model}, no core count "
                                         f"recorded; give --cpu-power-w")
