"""ONNX Runtime adapter: one span per ``InferenceSession.run``.

Usage::

    import onnxruntime as ort
    from loadprobe.instrumentation import onnxruntime as lp_ort

    lp_ort.instrument()                      # every session; stage = the model file's stem
    session = ort.InferenceSession("backbone.onnx", providers=["CPUExecutionProvider"])
    session.run(None, {"images": x})         # one "backbone" span: batch, shape, engine, flops, bytes
    lp_ort.uninstrument()

    lp_ort.instrument_session(session, stage="detector")   # or a single session

FLOPs and bytes come from the model's graph (``onnx_cost.model_cost``), worked out once per
input-shape signature, before the span starts. ``capture(model, samples, out="fp32.npz")``
(from ``onnx_capture``) writes chosen intermediate outputs for ``loadprobe align``.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

from loadprobe.record.probe import Span, note_extract_error, recording

from ._deps import require

ort = require("onnxruntime", extra="onnxruntime")

from .onnx_cost import ModelCost, load_graph, model_cost  # noqa: E402 - needs onnx, after the runtime


def __getattr__(name: str):
    # ``capture`` (layer outputs for loadprobe align, docs/align.md) is offline work: its module, and
    # the align package behind it, load when it is first asked for, not in the instrumented service.
    if name == "capture":
        from .onnx_capture import capture

        return capture
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "TARGET_VERSIONS", "ModelCost", "capture", "instrument", "instrument_session", "model_cost", "provider_engine",
    "uninstrument", "uninstrument_session",
]

TARGET_VERSIONS = ("onnxruntime >= 1.16", "onnx >= 1.14")

# The run() every traced call ends in. Captured at import, so a wrapper never calls a wrapper:
# a session instrumented on its own and by instrument() still records one span per run.
_original_run = ort.InferenceSession.run
_own_run = ort.InferenceSession.__dict__.get("run")  # None: inherited from Session
_global = False
_sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> _Traced

_MAX_SHAPES = 1024  # costs cached per session; a model fed ever-new shapes stops costing past this
_GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "DmlExecutionProvider")
_NAMED_PROVIDERS = {"CPUExecutionProvider": "cpu", "OpenVINOExecutionProvider": "openvino",
                    "CoreMLExecutionProvider": "coreml"}


def instrument() -> None:
    """Record a span for every ``InferenceSession.run`` of every session, old and new."""
    global _global
    _global = True
    if ort.InferenceSession.__dict__.get("run") is not _traced_run:
        ort.InferenceSession.run = _traced_run


def uninstrument() -> None:
    """Undo ``instrument()``; sessions instrumented one by one keep recording."""
    global _global
    _global = False
    if ort.InferenceSession.__dict__.get("run") is _traced_run:
        if _own_run is None:
            del ort.InferenceSession.run
        else:
            ort.InferenceSession.run = _own_run
    # Someone who wrapped our run() after us keeps calling it: _global now makes it pass through.


def instrument_session(session, stage: str = "backbone", model=None):
    """Record a span named ``stage`` for each ``session.run``; returns ``session``.

    ``model`` (a path, bytes or ModelProto) is the graph FLOPs and bytes are counted on;
    by default the file or bytes the session was created from. Calling it again replaces
    the stage and model.
    """
    _sessions[session] = _Traced(session, stage, model, explicit=True)
    session.run = _SessionRun(session)
    return session


def uninstrument_session(session) -> None:
    """Stop recording ``session``'s runs (other than through ``instrument()``)."""
    if isinstance(session.__dict__.get("run"), _SessionRun):
        del session.run
    _sessions.pop(session, None)


def provider_engine(provider: str, options: dict | None = None) -> str:
    """The ``engine`` of a span run by an execution provider.

    >>> provider_engine("CUDAExecutionProvider", {"device_id": "1"})
    'gpu1'
    """
    device = (options or {}).get("device_id") or 0
    if provider in _NAMED_PROVIDERS:
        return _NAMED_PROVIDERS[provider]
    if provider in _GPU_PROVIDERS:
        return f"gpu{device}"
    if provider == "CANNExecutionProvider":
        return f"npu{device}"
    return provider.lower().replace("executionprovider", "") or provider.lower()


class _SessionRun:
    """``session.run`` of a session instrumented on its own (holds it weakly: no reference cycle)."""

    __slots__ = ("session",)

    def __init__(self, session) -> None:
        self.session = weakref.ref(session)

    def __call__(self, *args, **kwargs):
        return _traced_run(self.session(), *args, **kwargs)


class _Traced:
    """What the spans of one session need, worked out once."""

    def __init__(self, session, stage: str, model, explicit: bool) -> None:
        self.stage = stage
        self.explicit = explicit
        self.model = model if model is not None else _session_model(session)
        self.graph = None  # load_graph(self.model), made on the first cost
        self.inputs = [i.name for i in session.get_inputs()]
        providers = session.get_providers()
        options = session.get_provider_options().get(providers[0]) if providers else None
        self.engine = provider_engine(providers[0], options) if providers else None
        self.costs: dict = {}  # ((name, dims), ...) -> ModelCost, or None where counting failed

    def cost(self, shapes: dict) -> ModelCost | None:
        key = tuple(shapes.items())
        if key in self.costs or len(self.costs) >= _MAX_SHAPES:
            return self.costs.get(key)
        cost = None
        try:
            if self.graph is None and self.model is not None:
                self.graph, self.model = load_graph(self.model), None  # keep the graph, drop the weights
            if self.graph is not None:
                cost = model_cost(self.graph, shapes)
        except Exception:  # shapes or a graph onnx cannot infer: count the error once, never retry
            note_extract_error()
        self.costs[key] = cost
        return cost


def _traced_run(self, *args, **kwargs):
    """``InferenceSession.run`` with a span around it."""
    if not recording():
        return _original_run(self, *args, **kwargs)
    traced = _sessions.get(self)
    if traced is None or not (traced.explicit or _global):
        if not _global:  # a wrapper someone put around ours after uninstrument()
            return _original_run(self, *args, **kwargs)
        try:
            traced = _sessions[self] = _Traced(self, _default_stage(self), None, explicit=False)
        except Exception:
            return _original_run(self, *args, **kwargs)
    span = Span(traced.stage, engine=traced.engine)
    try:
        _describe(span, traced, args[1] if len(args) > 1 else kwargs.get("input_feed"))
    except Exception:  # never fail the run over its description
        note_extract_error()
    with span:
        return _original_run(self, *args, **kwargs)


def _describe(span: Span, traced: _Traced, feed) -> None:
    """Batch, shape, flops and bytes of one run with inputs ``feed``."""
    shapes = {name: _dims(feed[name]) for name in traced.inputs if name in feed}
    if not shapes:
        return
    dims = list(shapes.values())
    span.shape = dims
    span.batch = dims[0][0] if dims[0] else None
    cost = traced.cost(shapes)
    if cost is not None:
        span.flops, span.bytes = cost


def _dims(value) -> tuple:
    shape = value.shape  # numpy arrays: a tuple; OrtValue: a method
    return tuple(int(d) for d in (shape() if callable(shape) else shape))


def _session_model(session):
    return getattr(session, "_model_path", None) or getattr(session, "_model_bytes", None)


def _default_stage(session) -> str:
    path = getattr(session, "_model_path", None)
    return Path(os.fspath(path)).stem if path else "onnxruntime"
