"""Place a stage on a device's roofline: compute- or memory-bound, and how close to the roof."""

from __future__ import annotations

from ..portrait import Intensity, Roofline

DEFAULT_PRECISION = {"cpu": "fp32", "gpu": "fp16", "npu": "int8"}


def intensity(flops: float | None, nbytes: float | None, flops_dur_ns: int, bytes_dur_ns: int) -> Intensity | None:
    """Arithmetic intensity and achieved rates from a stage's annotated FLOPs and bytes."""
    if flops is None and nbytes is None:
        return None
    return Intensity(
        flops=flops,
        bytes=nbytes,
        flops_per_byte=flops / nbytes if flops is not None and nbytes else None,
        achieved_flops_per_s=flops / (flops_dur_ns / 1e9) if flops is not None and flops_dur_ns else None,
        achieved_bytes_per_s=nbytes / (bytes_dur_ns / 1e9) if nbytes is not None and bytes_dur_ns else None,
    )


def place(stage_intensity: Intensity, device, precision: str | None = None) -> Roofline | None:
    """The roofline verdict against a catalog ``device``; None without FLOPs and bytes or figures."""
    if stage_intensity is None or stage_intensity.flops_per_byte is None:
        return None
    precision = precision or DEFAULT_PRECISION.get(device.kind, "fp32")
    peak = device.peak(precision)
    bandwidth = device.memory_bandwidth_bytes_per_s
    if not peak or not bandwidth:
        return None
    ridge = peak / bandwidth
    ai = stage_intensity.flops_per_byte
    roof = min(peak, ai * bandwidth)
    achieved = stage_intensity.achieved_flops_per_s
    return Roofline(
        device=device.id,
        precision=precision,
        ridge_flops_per_byte=ridge,
        bound="compute" if ai >= ridge else "memory",
        roof_flops_per_s=roof,
        pct_of_roof=100.0 * achieved / roof if achieved is not None and roof else None,
    )
