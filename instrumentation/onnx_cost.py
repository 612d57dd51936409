"""FLOPs and bytes of one run of an ONNX model at given input shapes, read from its graph.

Usage::

    from loadprobe.instrumentation.onnx_cost import model_cost

    cost = model_cost("backbone.onnx", {"images": (8, 3, 640, 640)})
    cost.flops, cost.bytes

Pure ``onnx``: no runtime executes anything. Shapes come from ONNX shape inference, run with
the concrete input shapes you give, so the counts follow the batch size and resolution.
"""

from __future__ import annotations

import os
from math import prod
from typing import NamedTuple

from ._deps import require

onnx = require("onnx", extra="onnxruntime")

__all__ = ["TARGET_VERSIONS", "ModelCost", "load_graph", "model_cost"]

TARGET_VERSIONS = ("onnx >= 1.14",)

# Initializers up to this many elements keep their data in load_graph(): shape inference reads
# small constants (Reshape targets, Slice bounds); weights are only ever needed for their dims.
_KEEP_DATA_ELEMENTS = 1024

# Two FLOPs (a multiply and an add) per multiply-accumulate. Matrix products: the left operand is
# input 0. Convolutions: the index of the weight input.
_MATMUL_LIKE = frozenset({"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul"})
_CONV_LIKE = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}

# One FLOP per output element.
_ELEMENTWISE = frozenset({
    # arithmetic
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Neg", "Abs", "Reciprocal", "Sqrt", "Exp", "Log", "Erf",
    "Sin", "Cos", "Tan", "Floor", "Ceil", "Round", "Sign", "Max", "Min", "Mean", "Sum", "Clip",
    # activations
    "Relu", "LeakyRelu", "PRelu", "ThresholdedRelu", "Elu", "Selu", "Celu", "Gelu", "Sigmoid",
    "HardSigmoid", "HardSwish", "Swish", "Tanh", "Softplus", "Softsign", "Mish",
    # normalisations
    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization",
    "RMSNormalization", "LpNormalization", "MeanVarianceNormalization", "LRN",
    "Softmax", "LogSoftmax", "Hardmax",
})
_POOL = frozenset({"MaxPool", "AveragePool", "LpPool"})
_GLOBAL_POOL = frozenset({"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"})

# Element sizes in bits where numpy's itemsize is wrong (packed 4-bit types) or missing.
_PACKED_BITS = {getattr(onnx.TensorProto, name): 4 for name in ("INT4", "UINT4", "FLOAT4E2M1")
                if hasattr(onnx.TensorProto, name)}


class ModelCost(NamedTuple):
    """Work of one model run: ``flops`` performed and ``bytes`` moved to and from memory."""

    flops: float
    bytes: float


def load_graph(model) -> onnx.ModelProto:
    """``model`` (a path, serialized bytes or a ModelProto) without its weight data.

    Every initializer keeps its name, type and dims -- all ``model_cost`` needs -- but
    those over 1024 elements lose their values, so a cached graph costs kilobytes, not
    the model's size. A ModelProto you pass is copied, never changed.
    """
    if isinstance(model, onnx.ModelProto):
        graph = onnx.ModelProto()
        graph.CopyFrom(model)
    elif isinstance(model, (bytes, bytearray)):
        graph = onnx.load_from_string(bytes(model))
    elif isinstance(model, (str, os.PathLike)):
        graph = onnx.load(os.fspath(model), load_external_data=False)
    else:
        raise TypeError(f"model must be a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    for tensor in graph.graph.initializer:
        if prod(tensor.dims) > _KEEP_DATA_ELEMENTS:
            for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
                          "string_data"):
                tensor.ClearField(field)
    return graph


def model_cost(model, input_shapes: dict[str, tuple]) -> ModelCost:
    """FLOPs and bytes of one run of ``model`` with inputs of ``input_shapes`` ({name: dims}).

    Rules, per node of the main graph after shape inference:

    - Conv, ConvTranspose, Gemm, MatMul and the quantized QLinearConv, QLinearMatMul,
      ConvInteger, MatMulInteger: 2 FLOPs per multiply-accumulate (bias additions not
      counted, as in ``torch.utils.flop_counter``). Conv: output elements x C_in/group x
      kernel size; ConvTranspose: input elements x C_out/group x kernel size; Gemm and
      MatMul: output elements x the inner dimension K.
    - Elementwise arithmetic, activations and normalisations (Add, Relu, Sigmoid,
      BatchNormalization, LayerNormalization, Softmax, ...): 1 FLOP per output element.
    - Pooling: kernel size FLOPs per output element (a global pool's kernel is the whole
      spatial input).
    - Everything else (Reshape, Transpose, Concat, Gather, Resize, ...), nodes in other
      domains (e.g. com.microsoft fused ops), nodes inside If/Loop/Scan subgraphs and nodes
      whose shapes inference cannot tell (after NonZero, NonMaxSuppression): 0.

    Bytes: every initializer, plus the graph's inputs and outputs, at their element size;
    an output of unknown size counts nothing. Shapes that do not fit the model raise
    ``onnx.shape_inference.InferenceError``.

    >>> cost = model_cost("backbone.onnx", {"images": (8, 3, 640, 640)})  # doctest: +SKIP
    """
    graph_model = load_graph(model)
    graph = graph_model.graph
    initializers = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name in input_shapes:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in input_shapes[value.name]:
                dims.add().dim_value = int(size)
    # strict: shapes that do not fit the model raise instead of leaving every count at 0
    inferred = onnx.shape_inference.infer_shapes(graph_model, strict_mode=True, data_prop=True).graph

    shapes = {t.name: tuple(t.dims) for t in inferred.initializer}
    for value in (*inferred.input, *inferred.value_info, *inferred.output):
        shapes[value.name] = _dims(value)

    flops = sum(_node_flops(node, shapes) for node in inferred.node if node.domain in ("", "ai.onnx"))
    moved = sum(prod(t.dims) * _element_bits(t.data_type) for t in inferred.initializer) / 8
    for value in (*(v for v in inferred.input if v.name not in initializers), *inferred.output):
        dims = shapes.get(value.name)
        if dims is not None:
            moved += prod(dims) * _element_bits(value.type.tensor_type.elem_type) / 8
    return ModelCost(float(flops), float(moved))


def _dims(value) -> tuple | None:
    """A value's dims, or None when its rank or any dim is unknown."""
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
    return None if None in dims else dims


def _element_bits(data_type: int) -> int:
    if data_type in _PACKED_BITS:
        return _PACKED_BITS[data_type]
    try:
        return 8 * onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
    except (KeyError, TypeError, ValueError):  # strings, undefined: no fixed size
        return 0


def _node_flops(node, shapes: dict) -> int:
    op = node.op_type
    inputs, outputs = node.input, node.output
    out = shapes.get(outputs[0]) if outputs else None
    if out is None:
        return 0
    if op in _MATMUL_LIKE:
        a = shapes.get(inputs[0])
        if not a:
            return 0
        transposed = op == "Gemm" and _attribute(node, "transA", 0)
        inner = a[0] if transposed else a[-1]
        return 2 * prod(out) * inner
    if op in _CONV_LIKE:
        weight = shapes.get(inputs[_CONV_LIKE[op]])
        return 2 * prod(out) * prod(weight[1:]) if weight else 0
    if op == "ConvTranspose":
        x, weight = shapes.get(inputs[0]), shapes.get(inputs[1])
        return 2 * prod(x) * prod(weight[1:]) if x and weight else 0
    if op in _ELEMENTWISE:
        return prod(out)
    if op in _POOL:
        return prod(out) * prod(_attribute(node, "kernel_shape", ()))
    if op in _GLOBAL_POOL:
        x = shapes.get(inputs[0])
        return prod(out) * prod(x[2:]) if x else 0
    return 0


def _attribute(node, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default
