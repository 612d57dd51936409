"""PyTorch adapter: one span per forward of each module you name as a stage.

Usage::

    import loadprobe
    from loadprobe.instrumentation import torch as lp_torch

    lp_torch.instrument(model, {"backbone": model.backbone, "head": model.head}, count_flops=True)
    loadprobe.start("data/")
    model(images)            # a "backbone" and a "head" span, nested in any open span or request
    lp_torch.uninstrument(model)

Each span carries ``batch`` (leading dim of the first tensor argument), ``shape`` (every
tensor argument's shape), ``engine`` (``cpu``, ``gpu0``, ...), ``bytes`` (the module's
parameters and buffers plus its tensor inputs and outputs) and, with ``count_flops=True``,
``flops`` -- counted by ``torch.utils.flop_counter`` on the first call per input shapes and
reused for later calls with the same shapes.

``capture(model, samples, out="fp32.npz")`` (from ``torch_capture``) writes chosen module
outputs over a sample set for ``loadprobe align``.
"""

from __future__ import annotations

import sys
import threading
import weakref

from loadprobe.record.probe import Span, note_extract_error, recording

from ._deps import require

torch = require("torch", extra="torch")

from .torch_capture import capture  # noqa: E402 - layer outputs for loadprobe align (docs/align.md)

__all__ = ["TARGET_VERSIONS", "capture", "instrument", "uninstrument"]

TARGET_VERSIONS = ("torch >= 2.1",)

# Hooks are kept per staged module, not per model: a module staged again -- by a second
# instrument() call, or under another model -- swaps its hooks instead of adding a second pair.
_hooks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> _StageHooks
_stages_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> WeakSet of its staged modules

_MAX_FLOP_SHAPES = 1024  # per stage; a model fed ever-new shapes stops counting past this
_engines: dict = {}  # torch.device -> engine name

# Inside a torch.compile'd region the hooks are traced into the graph, where timing means
# nothing: they step aside there (stage the compiled module itself to time it).
_compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling


def instrument(model, stages: dict | None = None, *, count_flops: bool = False, sync_cuda: bool = False):
    """Record a span for every forward of each module in ``stages`` ({stage name: module}).

    By default the whole ``model`` is one stage named after its class. Instrumenting a
    model again replaces its stages. ``count_flops=True`` adds ``flops``: the first call per
    input shapes runs under ``FlopCounterMode`` (that call is slower, and its span shows it).
    ``sync_cuda=True`` synchronizes the input's CUDA device before the span starts and before
    it ends, so a span times the GPU work, not its launch. Returns ``model``.
    """
    if stages is None:
        stages = {type(model).__name__: model}
    for name, module in stages.items():
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"stage {name!r} is a {type(module).__name__}, not a torch.nn.Module")
    counter = None
    if count_flops:
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode
    uninstrument(model)
    for name, module in stages.items():
        old = _hooks.pop(module, None)
        if old is not None:
            old.remove()
        _hooks[module] = _StageHooks(module, str(name), counter, sync_cuda)
    _stages_of[model] = weakref.WeakSet(stages.values())
    return model


def uninstrument(model) -> None:
    """Remove the hooks ``instrument(model)`` added (from ``model`` and all its submodules)."""
    staged = set(_stages_of.pop(model, ()))
    for module in (*staged, *model.modules()):
        hooks = _hooks.pop(module, None)
        if hooks is not None:
            hooks.remove()


class _OpenCalls(threading.local):
    """Per thread: the open calls of one staged module, innermost last."""

    def __init__(self) -> None:
        self.stack: list = []


class _StageHooks:
    """The forward pre-hook and forward hook of one staged module.

    The two hooks share nothing but this object, so each open call's span waits on a stack
    per thread: the same module may run on several threads at once, or inside itself.
    """

    def __init__(self, module, stage: str, counter, sync_cuda: bool) -> None:
        self.stage = stage
        self.counter = counter  # FlopCounterMode, or None: no FLOP counting
        self.sync_cuda = sync_cuda
        self.flops: dict = {}  # input shapes -> FLOPs of one forward
        self.weight_bytes = None  # parameters and buffers, measured on the first recorded call
        self.local = _OpenCalls()
        self.handles = (
            module.register_forward_pre_hook(self.before, with_kwargs=True),
            module.register_forward_hook(self.after, with_kwargs=True, always_call=True),
        )

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def before(self, module, args, kwargs) -> None:
        if not recording() or _compiling():
            return  # nothing records, or traced by torch.compile
        span = Span(self.stage)
        tensors, shapes, device, counter = (), (), None, None
        try:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            tensors += [v for v in kwargs.values() if isinstance(v, torch.Tensor)]
            shapes = tuple(tuple(t.shape) for t in tensors)
            if tensors:
                device = tensors[0].device
                span.batch = shapes[0][0] if shapes[0] else None
                span.shape = shapes
                span.engine = _engine(device)
            if self.weight_bytes is None:
                self.weight_bytes = _nbytes(module.parameters()) + _nbytes(module.buffers())
            span.bytes = self.weight_bytes + _nbytes(tensors)
        except Exception:
            note_extract_error()  # counted like a probe's failing extractor
        if self.counter is not None:
            span.flops = self.flops.get(shapes)
            if span.flops is None and len(self.flops) < _MAX_FLOP_SHAPES:
                try:
                    # Counts this very forward (not a second one: no double side effects). It stays
                    # entered until after(), which torch calls even when forward raises an Exception.
                    counter = self.counter(display=False)
                    counter.__enter__()
                except Exception:
                    counter = None
                    note_extract_error()
        if not (self.sync_cuda and device is not None and device.type == "cuda"):
            device = None
        else:
            _synchronize(device)
        # What was being handled when the call began: after() must not mistake it for forward's own.
        handled = sys.exc_info()[1]
        self.local.stack.append((span, handled, counter, shapes, device))
        span.__enter__()  # last, so the span times the forward and not this hook

    def after(self, module, args, kwargs, output) -> None:
        stack = self.local.stack
        if not stack or _compiling():
            return  # before() recorded nothing for this call
        span, handled, counter, shapes, device = stack.pop()
        # torch calls this hook from its `except Exception:` block when forward raised. (Not for
        # a KeyboardInterrupt: that call's span stays open and is never written.)
        error = sys.exc_info()[1]
        if error is handled:
            error = None
        try:
            if counter is not None:
                counter.__exit__(None, None, None)
                if error is None:  # a failed forward's count is partial: count again next time
                    span.flops = self.flops[shapes] = counter.get_total_flops()
            if span.bytes is not None and error is None:
                span.bytes += _nbytes(_output_tensors(output))
        except Exception:
            note_extract_error()
        if device is not None:
            _synchronize(device)  # last, so the span ends when the GPU is done
        span.__exit__(None if error is None else type(error), error, None)


def _engine(device) -> str:
    """``cpu`` -> ``cpu``, ``cuda:N`` -> ``gpuN`` (the recorder's GPU names), else the device type."""
    name = _engines.get(device)
    if name is None:
        if device.type == "cuda":
            name = f"gpu{device.index or 0}"
        else:
            name = device.type
        _engines[device] = name
    return name


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _output_tensors(output, depth: int = 0) -> list:
    """Tensors in a forward's output: a tensor, or inside tuples, lists and dicts (two levels deep)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if depth > 2:
        return []
    if isinstance(output, dict):
        output = output.values()
    elif not isinstance(output, (tuple, list)):
        return []
    found: list = []
    for item in output:
        found += _output_tensors(item, depth + 1)
    return found


def _synchronize(device) -> None:
    try:
        torch.cuda.synchronize(device)
    except Exception:  # a broken device fails the forward itself; the hook stays quiet
        note_extract_error()
