"""Capture module outputs of a PyTorch model over a fixed sample set, for ``loadprobe align``.

Usage::

    from loadprobe.instrumentation.torch import capture

    capture(model, images, out="fp32.npz")                        # every leaf module, and the output
    capture(int8_model, images, out="int8.npz")                   # the same module names
    capture(model, (ids, mask), layers=["encoder.layers.3", "head"], out="x.npz")

A layer is a module, named by its path in ``model.named_modules()``; a module called several
times in one forward gives one layer per call (``block.relu``, ``block.relu#1``, ...). The
layers a layer is computed from are found by following tensors from one module's output to
another's input; where a functional operation in between hides that, the previous captured
layer is taken (a sequential model's reading). The model runs in ``eval()`` mode under
``torch.inference_mode()``; its mode is restored afterwards.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadprobe._errors import LoadprobeError
from loadprobe.align.capture import CaptureWriter, samples_digest

from ._deps import require

torch = require("torch", extra="torch")

__all__ = ["capture"]

OUTPUT = "output"  # the layer name of the model's own return value, when no module returned it


def capture(model, samples, *, out, layers="all", batch_size: int = 8, overwrite: bool = False) -> Path:
    """Run ``samples`` through ``model`` and write the chosen layers' outputs to ``out`` (.npz).

    ``samples``: a tensor or array (samples, ...), a tuple of them (positional arguments)
    or a dict (keyword arguments). ``layers``: ``"all"`` (every leaf module) or module
    paths; the model's output is always captured. Returns the file's path; an existing
    file is replaced only with ``overwrite=True``.
    """
    if not isinstance(model, torch.nn.Module):
        raise LoadprobeError(f"capture needs a torch.nn.Module, got a {type(model).__name__}")
    args, kwargs, n = _split(samples)
    name = type(model).__name__
    modules = dict(model.named_modules())
    if layers == "all":
        chosen = {path: m for path, m in modules.items() if path and not any(True for _ in m.children())}
    else:
        chosen = {}
        for path in [layers] if isinstance(layers, str) else layers:
            if path not in modules or not path:
                examples = ", ".join(p for p in list(modules)[1:6])
                raise LoadprobeError(f"{name}: no module named {path!r}; name modules by their path in "
                                     f"model.named_modules() (e.g. {examples}), or pass layers='all'")
            chosen[path] = modules[path]
    digest = samples_digest([_numpy(a) for a in args] + [_numpy(v) for _, v in sorted(kwargs.items())])
    writer = CaptureWriter("torch", name, n_samples=n, digest=digest,
                           selection=layers if layers == "all" else list(chosen),
                           extra={"torch_version": torch.__version__})
    recorder = _Recorder(chosen, strict=layers != "all", model_name=name)
    handles = [m.register_forward_hook(recorder.hook(path), with_kwargs=True) for path, m in chosen.items()]
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    training = model.training
    model.eval()
    step = max(1, int(batch_size))
    declared = None
    try:
        with torch.inference_mode():
            for start in range(0, n, step):
                batch_args = [_tensor(a[start:start + step], device) for a in args]
                batch_kwargs = {k: _tensor(v[start:start + step], device) for k, v in kwargs.items()}
                recorder.begin(batch_args + list(batch_kwargs.values()))
                try:
                    result = model(*batch_args, **batch_kwargs)
                except LoadprobeError:
                    raise
                except Exception as exc:
                    raise LoadprobeError(f"{name}: the forward of samples {start}-{start + step - 1} failed ({exc}); "
                                         "check the samples against the model's inputs") from None
                calls = recorder.finish(result)
                names = [c[0] for c in calls]
                if declared is None:
                    declared = names
                    for layer, nodes, op, inputs, is_output, _ in calls:
                        writer.declare(layer, nodes=nodes, op=op, inputs=inputs, output=is_output)
                elif names != declared:
                    diff = next((a for a, b in zip(names + [None], declared + [None]) if a != b), None)
                    raise LoadprobeError(f"{name}: samples {start}-{start + step - 1} ran different layers from the "
                                         f"first batch (at {diff!r}); a capture needs the same layers for every "
                                         "sample: capture the modules every input runs")
                for layer, *_, value in calls:
                    writer.add(layer, value)
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)
    return writer.save(out, overwrite=overwrite)


class _Recorder:
    """The forward hooks' shared state for one batch: each call's output and where it came from."""

    def __init__(self, chosen: dict, *, strict: bool, model_name: str) -> None:
        self.types = {path: type(m).__name__ for path, m in chosen.items()}
        self.strict = strict
        self.model_name = model_name
        self.calls: list = []
        self.owner: dict[int, str] = {}
        self.keep: list = []  # the tensors whose ids are in owner, kept alive until the batch ends
        self.counts: dict[str, int] = {}
        self.inputs: set = set()

    def begin(self, inputs) -> None:
        self.calls, self.owner, self.keep, self.counts = [], {}, list(inputs), {}
        self.inputs = {id(t) for t in inputs if isinstance(t, torch.Tensor)}

    def hook(self, path: str):
        def record(module, args, kwargs, output):
            tensor = _first_tensor(output)
            if tensor is None or not tensor.is_floating_point():
                if self.strict:
                    raise LoadprobeError(f"{self.model_name}: module {path!r} returns no float tensor; capture "
                                         "modules that return one")
                return
            k = self.counts.get(path, 0)
            self.counts[path] = k + 1
            name = path if k == 0 else f"{path}#{k}"
            feeding = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            inputs = [self.owner[id(t)] for t in feeding if id(t) in self.owner]
            if not inputs and self.calls and not any(id(t) in self.inputs for t in feeding):
                inputs = [self.calls[-1][0]]  # fed through a functional op: take the previous layer
            self.owner[id(tensor)] = name
            self.keep.append(tensor)
            self.calls.append([name, (path,), self.types[path], list(dict.fromkeys(inputs)), False, _numpy(tensor)])

        return record

    def finish(self, result) -> list:
        tensor = _first_tensor(result)
        if tensor is None or not tensor.is_floating_point():
            raise LoadprobeError(f"{self.model_name}: the model returns no float tensor to compare; "
                                 "wrap it so that forward returns its output tensor")
        if id(tensor) in self.owner:
            for call in self.calls:
                if call[0] == self.owner[id(tensor)]:
                    call[4] = True
        else:
            taken = {c[0] for c in self.calls}
            name = OUTPUT if OUTPUT not in taken else f"{OUTPUT}#model"
            inputs = [self.calls[-1][0]] if self.calls else []
            self.calls.append([name, (), "output", inputs, True, _numpy(tensor)])
        calls, self.calls, self.keep, self.owner = self.calls, [], [], {}
        return calls


def _split(samples) -> tuple[list, dict, int]:
    if isinstance(samples, dict):
        args, kwargs = [], dict(samples)
    elif isinstance(samples, (tuple, list)):
        args, kwargs = list(samples), {}
    else:
        args, kwargs = [samples], {}
    values = args + list(kwargs.values())
    if not values:
        raise LoadprobeError("no samples given: pass a tensor (samples, ...), a tuple or a dict of them")
    counts = [len(v) if getattr(v, "ndim", 0) else 0 for v in values]
    if len(set(counts)) != 1 or counts[0] == 0:
        raise LoadprobeError(f"every sample input needs the same number of samples on its first dimension; got "
                             f"{', '.join(map(str, counts))}")
    return args, kwargs, counts[0]


def _tensor(value, device):
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    return value.to(device)


def _numpy(value) -> np.ndarray:
    """A copy: a later in-place module (``ReLU(inplace=True)``) must not change what was captured."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.is_floating_point() and value.dtype not in (torch.float32, torch.float64, torch.float16):
            value = value.float()  # bfloat16 and float8 have no numpy type
        return np.array(value.cpu().numpy(), copy=True)
    return np.asarray(value)


def _first_tensor(value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        return value
    if depth > 2:
        return None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item, depth + 1)
            if found is not None:
                return found
    return None
