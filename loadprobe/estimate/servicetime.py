"""How long a stage would take on an engine: measured where it was recorded, else scaled on the roofline.

Usage::

    profile = StageProfile.of(portrait.stage("backbone"), recorded_device=catalog.get("amd-epyc-9654"))
    est = service_time(profile, target=catalog.get("ascend-310p"), kind="npu", precision="int8", batch=4)
    est.mean_ms, est.p50_ms, est.p95_ms, est.source, est.how   # per batch of 4; "roofline-estimate", why
    est.distribution                                           # the recorded shape at that level

The rule: a stage moving ``F`` FLOPs and ``B`` bytes takes ``B * max(I / peak, 1 / bandwidth)``
on a device at its roof, with ``I = F / B`` its arithmetic intensity. Moving it keeps its
measured efficiency, so the estimated time is the measured time times the ratio of the two
roof times -- only the intensity matters, not how the FLOPs were annotated. When the
recorded device is not in the catalog, the target is assumed to reach
``ASSUMED_EFFICIENCY`` of its roof instead, and the ``how`` says so. A stage with no FLOPs or
bytes recorded cannot be scaled: its measured time is kept, said plainly.

Every estimate is the stage's recorded distribution (``estimate.distribution``: its quantiles and
its exact mean self time) moved to a new level: the mean at the plan's batch size (the recorded
batch->latency fit, a least-squares line and so a line through means) times the roofline ratio.
The shape -- the tail a heavy-tailed stage brings -- carries over unchanged; nothing is fitted
through two percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..schema import engine_kind
from .distribution import Distribution, Figures

ASSUMED_EFFICIENCY = 0.5
"""Share of a target's roof reached when the recorded device's own roof is unknown."""

ACCELERATOR_CALL_MS = 0.1
"""Fixed cost of one execution on an accelerator the stage was not recorded on: kernel launches,
host-device copies and synchronisation, which the roofline does not see (assumption)."""

ESTIMATE_ERROR = 3.0
"""The stated error bound of a time not measured where it will run (a roofline estimate, or a time
measured on another engine and kept): the real time may be up to this many times the estimate, or
as little as its inverse. An assumption -- a roofline sees neither kernel efficiency nor launch
overheads, and factors of 2-3 between such estimates and measurements are common -- so plans widen
the timeouts built on such a time by it and say so; ``loadprobe verify --calibrate`` replaces it
with the observed time."""

DEFAULT_DEVICE = {"gpu": "nvidia-l4", "npu": "ascend-310p"}
"""Catalog device assumed for an accelerator named without one (``--engines gpu``)."""

RECORDED_HOST_CPU = "recorded-host-cpu"
"""The id of the host CPU as its recording shows it (``recorded_host_cpu``)."""


def recorded_host_cpu(portrait):
    """The host CPU as the recording shows it, for estimating there a stage recorded on another engine: a
    catalog-shaped Device whose fp32 peak and memory bandwidth are the most FLOP/s and bytes/s any stage
    recorded on the CPU achieved -- so an estimate there is never faster than the host has shown -- named
    after the recorded CPU model. None when no stage recorded on the CPU carries both FLOPs and bytes."""
    from types import MappingProxyType

    from ..catalog import Device

    flops, moved = [], []
    for stage in portrait.stages:
        kinds = [engine_kind(e) for e in (stage.engines or {})] or ["cpu"]
        if max(set(kinds), key=kinds.count) != "cpu" or stage.intensity is None:
            continue
        if stage.intensity.achieved_flops_per_s and stage.intensity.achieved_bytes_per_s:
            flops.append((stage.intensity.achieved_flops_per_s, stage.name))
            moved.append((stage.intensity.achieved_bytes_per_s, stage.name))
    if not flops:
        return None
    hardware = getattr(portrait.data_quality, "host_hardware", None) or {}
    model = next((h["cpu_model"] for h in hardware.values() if isinstance(h.get("cpu_model"), str)), "the host CPU")
    (peak, by_flops), (bandwidth, by_bytes) = max(flops), max(moved)
    return Device(id=RECORDED_HOST_CPU, kind="cpu", vendor="(recorded)", name=f"{model}, as recorded",
                  peak_flops=MappingProxyType({"fp32": peak}), memory_bandwidth_bytes_per_s=bandwidth,
                  memory_bytes=None, tdp_w=None, price_usd=None, dynamic_shapes="native", int8=False,
                  sources=MappingProxyType({"peak_flops": f"the most FLOP/s a CPU stage achieved: {by_flops}",
                                            "memory_bandwidth_bytes_per_s":
                                                f"the most bytes/s a CPU stage achieved: {by_bytes}"}),
                  aliases=())


def estimate_target(kind: str, device, profile, host_cpu):
    """The device a stage's time on an engine of ``kind`` is estimated against: the engine's catalog
    ``device``; for the host CPU (no device), none where the stage was recorded on the CPU (its own times
    stand) and the recorded host CPU (``recorded_host_cpu``) where it was recorded on another engine."""
    if kind == "cpu" and device is None:
        return host_cpu if profile.kind != "cpu" else None
    return device


MIN_CPU_SPANS = 10
"""Spans sampled for their CPU (``Stage.cpu_spans``) a stage needs before its ``cpu_share`` is planned on."""


def cpu_share(stage) -> float:
    """The share of a stage's own time that is work on a core: the portrait's ``cpu_share`` where at least
    ``MIN_CPU_SPANS`` of its spans were sampled for it, else 1 (all of it, as a recording without CPU times
    must be read). ``cpu_share(stage)`` -> 0.25 for a stage that computes 1 ms and awaits 3 ms."""
    share, spans = getattr(stage, "cpu_share", None), getattr(stage, "cpu_spans", None)
    if share is None or not spans or spans < MIN_CPU_SPANS:
        return 1.0
    return min(1.0, max(0.01, share))


@dataclass(frozen=True)
class StageProfile(Figures):
    """The measured figures of one stage that service-time estimates start from."""

    name: str
    kind: str  # the engine kind it was recorded on
    distribution: Distribution  # self time per execution (children excluded), as recorded
    batch_mean: float
    items_per_request: float  # batch items one request brings (1 when a batcher's batch counts requests)
    fit_a_ms: float | None  # self time ~ a + b * batch, when recorded at several batch sizes
    fit_b_ms: float | None
    flops_per_byte: float | None
    achieved_bytes_per_s: float | None
    dynamic_shape: bool
    shape_growth: float  # largest / mean elements of the recorded shapes (padding cost)
    recorded_device: object | None  # catalog Device or None
    recorded_precision: str
    bytes_per_execution: float | None = None  # memory traffic of one execution as recorded (about: achieved rate x time)
    cpu_share: float = 1.0  # of its self time, the work on a core (``cpu_share``); the rest waited

    @classmethod
    def of(cls, stage, *, recorded_device=None, recorded_precision: str | None = None) -> StageProfile:
        distribution = Distribution.of_stage(stage)
        lat_mean = stage.latency_ms.mean if stage.latency_ms is not None else None
        self_fraction = (max(0.0, min(1.0, distribution.mean_ms / lat_mean)) if lat_mean else 1.0)
        kinds = [engine_kind(e) for e in (stage.engines or {})]
        kind = max(set(kinds), key=kinds.count) if kinds else "cpu"
        fit = stage.batch.fit if stage.batch is not None else None
        intensity = stage.intensity
        shapes = stage.shapes
        return cls(
            name=stage.name, kind=kind, distribution=distribution,
            batch_mean=stage.batch.mean if stage.batch is not None else 1.0,
            # A stage that records queue time is fed by a batcher: its batch counts requests. Otherwise
            # the batch is the items of one request (boxes, tokens) and plan batches multiply it.
            items_per_request=1.0 if stage.queue_ms is not None or stage.batch is None else stage.batch.mean,
            fit_a_ms=fit.a_ms * self_fraction if fit is not None and fit.r2 is not None and fit.r2 >= 0.5 else None,
            fit_b_ms=fit.b_ms_per_item * self_fraction if fit is not None and fit.r2 is not None and fit.r2 >= 0.5
            else None,
            flops_per_byte=intensity.flops_per_byte if intensity is not None else None,
            achieved_bytes_per_s=intensity.achieved_bytes_per_s if intensity is not None else None,
            dynamic_shape=bool(shapes is not None and shapes.dynamic_shape),
            shape_growth=_shape_growth(shapes),
            recorded_device=recorded_device,
            recorded_precision=recorded_precision or ("fp32" if kind == "cpu" else "fp16"),
            bytes_per_execution=(intensity.achieved_bytes_per_s * lat_mean / 1000.0
                                 if intensity is not None and intensity.achieved_bytes_per_s and lat_mean else None),
            cpu_share=cpu_share(stage) if kind == "cpu" else 1.0,
        )

    def measured_ms(self, requests: float) -> float:
        """Mean self time of one execution serving ``requests`` requests, on the recorded engine."""
        items = requests * self.items_per_request
        if self.fit_a_ms is not None and self.fit_b_ms is not None and self.fit_b_ms > 0:
            return max(1e-6, self.fit_a_ms + self.fit_b_ms * items)
        # no usable batch->latency fit: time grows in proportion, batching gains nothing
        return self.mean_ms * items / max(1.0, self.batch_mean)

    def scaled(self, factor: float) -> StageProfile:
        """The same stage with every time ``factor`` times as long (its batch fit too): waits taken out, say."""
        return replace(self, distribution=self.distribution.scaled(factor),
                       fit_a_ms=None if self.fit_a_ms is None else self.fit_a_ms * factor,
                       fit_b_ms=None if self.fit_b_ms is None else self.fit_b_ms * factor)

    def at(self, mean_ms: float) -> Distribution:
        """The recorded distribution moved to the level ``mean_ms``: the shape kept, the tail with it."""
        return self.distribution.with_mean(mean_ms)


@dataclass(frozen=True)
class ServiceTime(Figures):
    distribution: Distribution  # one execution of ``batch`` items
    batch: int
    source: str  # measured | roofline-estimate | unscaled | calibrated (observed by loadprobe verify)
    how: str  # one sentence: where the figure comes from
    busy_share: float = 1.0  # the share of an execution that keeps its engine busy: a CPU stage's work, not its waits

    def scaled(self, factor: float, source: str, how: str) -> ServiceTime:
        return ServiceTime(self.distribution.scaled(factor), self.batch, source, how, self.busy_share)

    @property
    def busy_ms(self) -> float:
        """What one execution loads its engine with (ms): the mean, less the waits of a CPU stage."""
        return self.mean_ms * self.busy_share

    def to_dict(self) -> dict:
        """As plans.json shows it; ``file_dict`` is what pipeline.yaml keeps."""
        return {"mean_ms": self.mean_ms, "p50_ms": self.p50_ms, "p95_ms": self.p95_ms, "p99_ms": self.p99_ms,
                "batch": self.batch, "source": self.source, "how": self.how}

    def file_dict(self) -> dict:
        """pipeline.yaml's ``service_time_ms``: the figures, the recorded shape (``cdf``) and where they come from."""
        figure = lambda ms: float(f"{ms:.6g}")  # noqa: E731 - a sub-microsecond stage keeps its level
        out = {"p50": figure(self.p50_ms), "p95": figure(self.p95_ms), "p99": figure(self.p99_ms),
               "mean": figure(self.mean_ms), "cdf": self.distribution.to_cdf(), "source": self.file_source}
        if self.error_factor != 1.0:
            out["error_factor"] = self.error_factor
        if self.busy_share < 1.0:
            out["cpu_share"] = float(f"{self.busy_share:.4g}")
        return out

    @property
    def error_factor(self) -> float:
        """How far off the figure may be: 1 where it was measured, ``ESTIMATE_ERROR`` for an estimate."""
        return 1.0 if self.source in ("measured", "calibrated") else ESTIMATE_ERROR

    @property
    def file_source(self) -> str:
        """The figure's source as pipeline.yaml writes it."""
        return {"unscaled": "measured-elsewhere", "calibrated": "measured"}.get(self.source, self.source)


def service_time(profile: StageProfile, *, target, kind: str, precision: str, batch: int) -> ServiceTime:
    """Estimated self time of one execution of ``batch`` items on ``target`` (a catalog Device or None)."""
    svc = _service_time(profile, target=target, kind=kind, precision=precision, batch=batch)
    if kind == "cpu" and profile.kind == "cpu" and profile.cpu_share < 1.0:  # its waits stay waits on any CPU
        return replace(svc, busy_share=profile.cpu_share,
                       how=f"{svc.how}; {profile.cpu_share:.0%} of it uses a core (its spans' CPU), the rest waits")
    return svc


def _service_time(profile: StageProfile, *, target, kind: str, precision: str, batch: int) -> ServiceTime:
    base = profile.measured_ms(batch)
    same_place = kind == profile.kind and (target is None or target == profile.recorded_device
                                           or profile.recorded_device is None and kind == "cpu")
    if same_place:
        how = f"measured: mean {base:.3g} ms at batch {batch}"
        if profile.fit_b_ms is not None:
            how += f" from the recorded fit {profile.fit_a_ms:.3g} + {profile.fit_b_ms:.3g} ms x batch"
        return ServiceTime(profile.at(base), batch, "measured", how + _shape(profile))
    peakless = target is not None and (not target.peak(precision) or not (target.memory_bandwidth_bytes_per_s
                                                                           or target.weights_on_chip))
    if profile.flops_per_byte is None or target is None or peakless:
        why = (("the host CPU's rates are unknown: no stage recorded on it carries FLOPs and bytes (give one "
                "@probe(flops=..., bytes=...) on the CPU, or name the CPU with --engines cpu:DEVICE)")
               if target is None and kind == "cpu" else "the engine has no catalog device" if target is None else
               f"{target.id} publishes no {precision} peak or no memory bandwidth" if peakless else
               "no FLOPs/bytes were recorded for it")
        return ServiceTime(profile.at(base), batch, "unscaled",
                           f"kept at the measured mean {base:.3g} ms: {why}, so the roofline cannot scale it"
                           + _shape(profile))
    ratio, detail = _roof_ratio(profile, target, precision)
    pad = profile.shape_growth if profile.dynamic_shape and target.dynamic_shapes != "native" else 1.0
    call = ACCELERATOR_CALL_MS if kind != "cpu" else 0.0
    t = base * ratio * pad + call
    how = f"roofline estimate: measured mean {base:.3g} ms x {ratio:.3g} ({detail})"
    if pad > 1.0:
        how += f" x {pad:.3g} for padding dynamic shapes to the largest recorded ({target.name} {target.dynamic_shapes}s)"
    if call:
        how += f" + {call:g} ms per call for launches and host-device copies (assumed)"
    return ServiceTime(profile.at(t), batch, "roofline-estimate", how + _shape(profile))


def _shape(profile: StageProfile) -> str:
    """The words for the distribution an estimate carries: the recorded one, at the estimate's level."""
    d = profile.distribution
    if d.mean_ms <= 0 or d.p95_ms <= 1.5 * d.p50_ms:
        return ""
    return (f"; the recorded distribution at that level (recorded p50 {d.p50_ms:.3g}, p95 {d.p95_ms:.3g}, "
            f"mean {d.mean_ms:.3g} ms)")


def roof_seconds_per_byte(intensity: float, peak: float, bandwidth: float | None) -> float:
    """Seconds per byte moved at the roof: the slower of compute and memory (compute alone where the weights
    stay on chip: ``bandwidth`` None)."""
    return max(intensity / peak, 1.0 / bandwidth) if bandwidth else intensity / peak


def _roof_ratio(profile: StageProfile, target, precision: str) -> tuple[float, str]:
    ai = profile.flops_per_byte
    peak_t, bw_t = target.peak(precision), target.memory_bandwidth_bytes_per_s
    dest = roof_seconds_per_byte(ai, peak_t, bw_t)
    bound = "compute, weights on chip" if not bw_t else "compute" if ai * bw_t >= peak_t else "memory"
    if target.id == RECORDED_HOST_CPU and profile.achieved_bytes_per_s:  # its roof is already what it achieved
        measured = 1.0 / profile.achieved_bytes_per_s
        return dest / measured, (f"the host CPU's best recorded rates ({target.name}: {peak_t / 1e9:.3g} GFLOP/s, "
                                 f"{bw_t / 1e9:.3g} GB/s; {bound}-bound at {ai:.3g} FLOP/byte) vs the "
                                 f"{profile.achieved_bytes_per_s / 1e9:.3g} GB/s it achieved where recorded")
    src = profile.recorded_device
    if src is not None and src.peak(profile.recorded_precision) and src.memory_bandwidth_bytes_per_s:
        origin = roof_seconds_per_byte(ai, src.peak(profile.recorded_precision), src.memory_bandwidth_bytes_per_s)
        return dest / origin, (f"roof time at {ai:.3g} FLOP/byte on {target.id} {precision} ({bound}-bound) / "
                               f"on the recorded {src.id} {profile.recorded_precision}")
    if profile.achieved_bytes_per_s:
        measured = 1.0 / profile.achieved_bytes_per_s  # seconds per byte as recorded
        return (dest / ASSUMED_EFFICIENCY) / measured, (
            f"{target.id} {precision} at {ASSUMED_EFFICIENCY:.0%} of its roof ({bound}-bound at {ai:.3g} FLOP/byte) "
            f"vs the recorded {profile.achieved_bytes_per_s / 1e9:.3g} GB/s; the recorded device is not in the catalog")
    return 1.0, "no achieved rate recorded; time kept"


def _shape_growth(shapes) -> float:
    """Largest / span-weighted mean element count among the top recorded shapes (1 when unknown)."""
    if shapes is None or not shapes.top_shapes:
        return 1.0
    sizes = []
    for shape, spans in shapes.top_shapes:
        elements = 1
        try:
            for part in str(shape).split(",")[0].split("x"):
                elements *= max(1, int(part))
        except ValueError:
            return 1.0
        sizes.append((elements, spans))
    total = sum(n for _, n in sizes)
    mean = sum(e * n for e, n in sizes) / total if total else 0
    return max(e for e, _ in sizes) / mean if mean else 1.0
