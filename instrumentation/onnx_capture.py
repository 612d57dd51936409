"""Capture intermediate outputs of an ONNX model with ONNX Runtime, for ``loadprobe align``.

Usage::

    from loadprobe.instrumentation.onnxruntime import capture

    capture("backbone-fp32.onnx", images, out="fp32.npz")      # every float intermediate tensor
    capture("backbone-int8.onnx", images, out="int8.npz")      # a QDQ model: the same names
    capture("model.onnx", {"ids": ids, "mask": mask}, layers=["encoder/out", "head"], out="x.npz")

Intermediate tensors are made visible by adding them to the graph's outputs (on a copy of the
model; the file is not touched). A layer is named by its FP32 tensor name, so a statically
quantised QDQ model captures under the same names: where the quantiser put a
QuantizeLinear/DequantizeLinear pair on a tensor, the capture reads the dequantised value (what
the next layer consumes), whether the quantiser kept the tensor's name on it (graph outputs) or
added ``_DequantizeLinear_Output``. Each layer records its ``nodes`` -- the graph nodes that
compute it from the nearest captured layers -- which is what ``nodes_to_exclude`` of
``onnxruntime.quantization.quantize_static`` takes to keep it in float.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadprobe._errors import LoadprobeError
from loadprobe.align.capture import CaptureWriter, samples_digest

from ._deps import require

ort = require("onnxruntime", extra="onnxruntime")

__all__ = ["capture", "plan_layers"]

_QDQ = ("QuantizeLinear", "DequantizeLinear")
_HIDDEN_OPS = _QDQ + ("Constant",)
_DQ_SUFFIX = "_DequantizeLinear_Output"
_Q_INPUT_SUFFIX = "_QuantizeLinear_Input"
_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
          "tensor(bool)": np.bool_}


def capture(model, samples, *, out, layers="all", batch_size: int = 8, providers=None,
            overwrite: bool = False) -> Path:
    """Run ``samples`` through ``model`` and write the chosen layers' outputs to ``out`` (.npz).

    ``model``: a path, serialized bytes, an ``onnx.ModelProto`` or an ``InferenceSession``
    made from a file. ``samples``: an array (samples, ...) for a one-input model, or
    ``{input name: array}``. ``layers``: ``"all"`` (every float tensor a node computes) or
    node / tensor names; the model's outputs are always captured. Returns the file's path;
    an existing file is replaced only with ``overwrite=True``.
    """
    onnx = require("onnx", extra="onnxruntime")
    proto, name = _load(onnx, model)
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i.name for i in graph.input if i.name not in initializers]
    feeds = _feeds(name, inputs, samples)
    n = len(next(iter(feeds.values())))
    types = _float_tensors(onnx, proto)
    planned = plan_layers(graph, types, layers, name)
    if not planned:
        raise LoadprobeError(f"{name}: no float tensor to capture; name the layers (layers=[...])")
    known = {o.name for o in graph.output}
    for layer in planned:
        if layer["read"] not in known:
            graph.output.append(onnx.helper.make_tensor_value_info(layer["read"], types.get(layer["read"], 1), None))
            known.add(layer["read"])
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the copy's extra outputs make ORT chatty about unused initializers
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options,
                                       providers=providers or ["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise LoadprobeError(f"{name}: ONNX Runtime cannot load the model with its layers exposed ({exc})") from None
    dtypes = {i.name: _NUMPY.get(i.type) for i in session.get_inputs()}
    fixed = [i.shape[0] for i in session.get_inputs() if i.shape and isinstance(i.shape[0], int)]
    step = fixed[0] if fixed else max(1, int(batch_size))
    writer = CaptureWriter("onnxruntime", name, n_samples=n, digest=samples_digest([feeds[k] for k in inputs]),
                           selection=layers if layers == "all" else list(layers),
                           extra={"onnxruntime_version": ort.__version__})
    reads = [layer["read"] for layer in planned]
    kept = None
    for start in range(0, n, step):
        real = min(step, n - start)
        feed = {}
        for k, v in feeds.items():
            part = v[start:start + step]
            if real < step and fixed:  # a fixed batch dimension: pad with the last sample, drop it after
                part = np.concatenate([part, np.repeat(part[-1:], step - real, axis=0)])
            feed[k] = part.astype(dtypes.get(k) or part.dtype, copy=False)
        try:
            results = session.run(reads, feed)
        except Exception as exc:
            raise LoadprobeError(f"{name}: running samples {start}-{start + real - 1} failed ({exc}); "
                                 "check the samples' shapes and types against the model's inputs") from None
        if kept is None:
            kept = _per_sample(planned, results, len(next(iter(feed.values()))), layers == "all", name)
            for layer in _segments(graph, [planned[i] for i in kept]):
                writer.declare(layer["name"], nodes=layer["nodes"], op=layer["op"], inputs=layer["inputs"],
                               output=layer["output"])
        for i in kept:
            writer.add(planned[i]["name"], results[i][:real])
    return writer.save(out, overwrite=overwrite)


def plan_layers(graph, types: dict, layers, name: str = "model") -> list[dict]:
    """The layers to capture, in graph order: ``{"name", "read", "op", "producer", "output"}``.

    ``name`` is the FP32 tensor name; ``read`` the tensor holding its value in this graph (a
    QDQ model's dequantised copy).
    """
    producers = {o: node for node in graph.node for o in node.output if o}
    logical, read = _qdq_aliases(graph, producers)
    outputs = {o.name for o in graph.output}
    found: dict[str, dict] = {}
    by_node: dict[str, str] = {}
    for node in graph.node:
        if node.op_type in _HIDDEN_OPS:
            continue
        for t in node.output:
            if not t or t not in types:
                continue
            name_ = logical.get(t, t)
            if name_ in found:
                continue
            found[name_] = {"name": name_, "read": read.get(t, t), "op": node.op_type, "producer": t,
                            "output": name_ in outputs}
            by_node.setdefault(_node_name(node), name_)
    if layers == "all":
        return list(found.values())
    if isinstance(layers, str):
        layers = [layers]
    chosen = []
    for asked in layers:
        key = asked if asked in found else by_node.get(asked)
        if key is None:
            examples = ", ".join(list(found)[:5])
            raise LoadprobeError(f"{name}: no layer named {asked!r}; name a node or the float tensor it computes "
                                 f"(e.g. {examples}), or pass layers='all'")
        if key not in chosen:
            chosen.append(key)
    chosen += [k for k, v in found.items() if v["output"] and k not in chosen]
    order = list(found)
    return [found[k] for k in sorted(chosen, key=order.index)]


def _qdq_aliases(graph, producers) -> tuple[dict, dict]:
    """For a QDQ model: producer tensor -> its FP32 name, and -> the dequantised tensor to read."""
    logical, read = {}, {}
    for node in graph.node:
        if node.op_type != "DequantizeLinear" or not node.input:
            continue
        q = producers.get(node.input[0])
        if q is None or q.op_type != "QuantizeLinear" or not q.input:
            continue  # a weight's DequantizeLinear: not an activation
        x, y = q.input[0], node.output[0]
        name = x if y.endswith(_DQ_SUFFIX) else y  # graph outputs keep their name on the dequantised copy
        if name == x and x.endswith(_Q_INPUT_SUFFIX):
            name = x[:-len(_Q_INPUT_SUFFIX)]
        logical.setdefault(x, name)
        read.setdefault(x, y)
    return logical, read


def _segments(graph, layers: list[dict]) -> list[dict]:
    """Each layer with ``nodes`` (what computes it from the nearest captured layers) and ``inputs``."""
    producers = {o: node for node in graph.node for o in node.output if o}
    stop = {}
    for layer in layers:
        stop[layer["producer"]] = stop[layer["read"]] = stop[layer["name"]] = layer["name"]
    order = {id(n): i for i, n in enumerate(graph.node)}
    out = []
    for layer in layers:
        nodes, inputs, seen = [], [], set()
        todo = [layer["producer"]]
        while todo:
            tensor = todo.pop()
            node = producers.get(tensor)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if node.op_type not in _HIDDEN_OPS:
                nodes.append(node)
            for t in node.input:
                if t in stop and stop[t] != layer["name"]:
                    if stop[t] not in inputs:
                        inputs.append(stop[t])
                elif t:
                    todo.append(t)
        nodes.sort(key=lambda n: order[id(n)])
        out.append({**layer, "nodes": [_node_name(n) for n in nodes], "inputs": inputs})
    return out


def _per_sample(planned, results, batch: int, all_: bool, name: str) -> list[int]:
    """Indexes of layers with one output per sample (first dimension = the batch)."""
    kept = []
    for i, (layer, value) in enumerate(zip(planned, results)):
        value = np.asarray(value)
        if value.ndim >= 1 and value.shape[0] == batch:
            kept.append(i)
        elif not all_ or layer["output"]:
            dims = "x".join(map(str, value.shape)) or "a scalar"
            raise LoadprobeError(f"{name}: layer {layer['name']!r} gives {dims} for a batch of {batch}: not one output "
                                 "per sample, so it cannot be compared sample by sample; leave it out of layers=[...]")
    return kept


def _load(onnx, model):
    """(a ModelProto we may change, a display name)."""
    if isinstance(model, ort.InferenceSession):
        model = getattr(model, "_model_path", None) or getattr(model, "_model_bytes", None)
        if model is None:
            raise LoadprobeError("this InferenceSession keeps no model to capture from: pass the model's path")
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        return proto, model.graph.name or "onnx-model"
    if isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as exc:
            raise LoadprobeError(f"the model bytes are not an ONNX model ({exc})") from None
        return proto, proto.graph.name or "onnx-model"
    path = Path(model)
    if not path.is_file():
        raise LoadprobeError(f"{path}: no such model file")
    try:
        return onnx.load(str(path)), path.name
    except Exception as exc:
        raise LoadprobeError(f"{path}: not an ONNX model ({exc})") from None


def _feeds(name: str, inputs: list[str], samples) -> dict:
    if isinstance(samples, dict):
        missing = [i for i in inputs if i not in samples]
        if missing:
            raise LoadprobeError(f"{name}: samples lack the input {missing[0]!r}; give {{name: array}} for "
                                 f"every input ({', '.join(inputs)})")
        feeds = {i: np.asarray(samples[i]) for i in inputs}
    elif len(inputs) == 1:
        feeds = {inputs[0]: np.asarray(samples)}
    else:
        raise LoadprobeError(f"{name} has {len(inputs)} inputs ({', '.join(inputs)}); give samples as "
                             "{input name: array}")
    counts = {k: (len(v) if v.ndim else 0) for k, v in feeds.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise LoadprobeError(f"{name}: every input needs the same number of samples on its first dimension; "
                             f"got {', '.join(f'{k}: {c}' for k, c in counts.items())}")
    return feeds


def _float_tensors(onnx, proto) -> dict:
    """Tensor name -> ONNX element type, for the float tensors shape inference can type."""
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # a graph onnx cannot infer: use the types it declares
        inferred = proto.graph
    types = {}
    for info in (*inferred.value_info, *inferred.output, *inferred.input):
        elem = info.type.tensor_type.elem_type
        if elem in floats:
            types[info.name] = elem
    return types


def _node_name(node) -> str:
    return node.name or f"{node.op_type}->{node.output[0] if node.output else ''}"
