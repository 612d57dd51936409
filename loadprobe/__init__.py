"""loadprobe: record the load of an ML inference service, analyse its portrait, plan its hardware.

Recording, in the service::

    import loadprobe
    from loadprobe import probe, request

    loadprobe.start("data/", service="vision")   # or set LOADPROBE_DIR=data/

    @probe("backbone", batch=lambda x: x.shape[0], engine="npu")
    def backbone(x): ...

    loadprobe.stop()

``import loadprobe`` loads only the standard library; pyarrow and psutil load when a
recorder starts, and analysis libraries never load in the service.
"""

from __future__ import annotations

import os as _os

from ._errors import LoadprobeError
from ._imports import install_moved_modules as _install_moved_modules
from .record.probe import Span, probe, record_span, request
from ._version import __version__

__all__ = [
    "LoadprobeError",
    "Portrait",
    "Recorder",
    "RecorderStats",
    "Span",
    "__version__",
    "analyze",
    "current",
    "flush",
    "portrait_frames",
    "probe",
    "read_samples",
    "read_spans",
    "receive_otlp",
    "recommend",
    "record_span",
    "request",
    "simulate",
    "start",
    "stop",
]

_install_moved_modules()


def start(
    output_dir: str | _os.PathLike = "loadprobe-data",
    *,
    service: str | None = None,
    tags: dict | None = None,
    sample_devices: bool = True,
    sample_interval_s: float = 0.5,
    flush_interval_s: float = 1.0,
    **options,
):
    """Start recording this process into ``output_dir``; returns the :class:`Recorder`.

    Spans go to ``output_dir/<host>/<service>/<pid>-<start>/``. Further keywords:
    ``max_buffered_spans`` (memory cap, default 131,072), ``rotate_interval_s`` (60) and
    ``rotate_bytes`` (64 MiB) for segment rotation. Calling it again returns the running
    recorder. ``sample_devices=False`` leaves device sampling to someone else (``loadprobe
    record`` does it for its process tree); the process's interpreter CPU is sampled either way
    (``sample_interpreter=False`` to stop it). I/O problems never raise: they are counted in
    ``stats()`` and logged once.
    """
    from .record import recorder as _recorder

    return _recorder.start(
        output_dir,
        service=service,
        tags=tags,
        sample_devices=sample_devices,
        sample_interval_s=sample_interval_s,
        flush_interval_s=flush_interval_s,
        **options,
    )


def stop():
    """Flush, finish the files and stop recording; returns the final stats (None if not recording)."""
    from .record import recorder as _recorder

    return _recorder.stop()


def flush(timeout: float = 10.0) -> bool:
    """Write everything recorded so far; returns False if nothing is recording or it timed out."""
    from .record import recorder as _recorder

    return _recorder.flush(timeout)


def current():
    """The running :class:`Recorder`, or None."""
    from .record import recorder as _recorder

    return _recorder.current()


def analyze(paths, **options):
    """The load portrait of recorded data: ``loadprobe.analyze(["data/"]) -> Portrait``.

    Options mirror ``loadprobe analyze``: ``since``, ``until``, ``service``, ``host``,
    ``device``, ``precision``, ``catalog``, ``engine``, ``workers``, ``scheduler``.
    Analysis loads numpy and pyarrow only; call it outside the service's hot path.
    """
    from .analysis.run import analyze as run

    return run(paths, **options)


def recommend(portrait, constraints=None, **options):
    """A stage-to-engine plan for a Portrait: ``loadprobe.recommend(portrait, constraints) -> Plan``.

    ``constraints`` is a ``loadprobe.plan.constraints.Constraints`` (``Constraints.parse(engines=
    "cpu,gpu:nvidia-l4", slo_p95_ms=200)``), default the seeds' CPU + L4 + 310P line-up sized
    for the recorded peak. ``plan.to_pipeline()`` is the pipeline.yaml config; docs/recommend.md.
    """
    from .plan.planner import recommend as plan

    return plan(portrait, constraints, **options)


def simulate(plan, arrivals_s, service_times=None, **options):
    """Replay arrivals through a plan: ``loadprobe.simulate(plan, arrivals_s, service_times) -> SimulationResult``.

    ``plan`` is a ``PipelineConfig`` or the path of a pipeline.yaml; ``arrivals_s`` are arrival
    times in seconds (``loadprobe.load.poisson(200, duration=60)``, ``load.replay(...)``);
    ``service_times`` maps stages (or ``(stage, engine)``) to samplers, e.g.
    ``loadprobe.simulator.from_recording(config, "data/")``; default: each stage's
    ``service_time_ms``. Options: ``seed``, ``priorities``, ``error_rates``, ``executors``,
    ``prices``, ``price_per_kwh``, ``years``, ``window_s`` (docs/simulate.md).
    """
    from .simulator import simulate as run

    if isinstance(plan, (str, _os.PathLike)):
        from .pipeline.files import load

        plan = load(plan)
    return run(plan, arrivals_s, service_times, **options)


def receive_otlp(output_dir: str | _os.PathLike = "loadprobe-data", address: str = "127.0.0.1:4318", **options):
    """Receive OpenTelemetry traces over OTLP/HTTP and record them, started: ``loadprobe.receive_otlp("data/")``.

    Returns the running ``loadprobe.record.receiver.Receiver`` (``.endpoint``, ``.flush()``,
    ``.stop()``, ``.counters()``; a context manager too). Options: ``attributes`` (``FIELD=KEY``
    remappings), ``service``, ``host``, ``flush_interval_s``, ``max_buffered_spans``. Loads pyarrow:
    start it beside the service, not in its request path.
    """
    from .record.receiver import Receiver

    return Receiver(output_dir, address, **options).start()


def read_spans(paths, **filters):
    """Recorded spans as a pandas DataFrame: ``loadprobe.read_spans("data/", stage="backbone")``.

    Filters: service, host, stage, engine, status, since, until (``loadprobe.analysis.frames``);
    needs ``pip install 'loadprobe[pandas]'``.
    """
    from .analysis.frames import read_spans as read

    return read(paths, **filters)


def read_samples(paths, **filters):
    """Recorded device samples as a pandas DataFrame: ``loadprobe.read_samples("data/", metric="power_w")``."""
    from .analysis.frames import read_samples as read

    return read(paths, **filters)


def portrait_frames(portrait) -> dict:
    """A portrait's stages, traffic series, device metrics and verdicts as pandas DataFrames."""
    from .analysis.frames import portrait_frames as frames

    return frames(portrait)


def __getattr__(name: str):
    # Recorder and RecorderStats live with the flusher; importing them on demand keeps
    # ``import loadprobe`` free of anything but the standard library.
    if name in ("Recorder", "RecorderStats"):
        from .record import recorder as _recorder

        return getattr(_recorder, name)
    if name == "Portrait":
        from .portrait import Portrait

        return Portrait
    raise AttributeError(f"module 'loadprobe' has no attribute {name!r}")
