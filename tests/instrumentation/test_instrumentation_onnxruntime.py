"""The ONNX Runtime adapter and the ONNX cost model on a real session, recording real Parquet files."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from loadprobe.record import buffers as _buffers
from loadprobe import request  # noqa: E402
from loadprobe.instrumentation import onnxruntime as lp_ort  # noqa: E402
from loadprobe.instrumentation.onnx_cost import ModelCost, load_graph, model_cost  # noqa: E402

from ..conftest import by_stage, run_python, stopped_spans  # noqa: E402


def tiny_model() -> onnx.ModelProto:
    """x[N,3,8,8] -> Conv(4 filters 3x3, pad 1) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(4->10)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "conv_b"),
        numpy_helper.from_array(rng.standard_normal((4, 10)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what every supported onnxruntime reads
    onnx.checker.check_model(model)
    return model


def hand_cost(n: int) -> ModelCost:
    conv = 2 * (n * 4 * 8 * 8) * (3 * 3 * 3)  # 2 x output elements x C_in x kernel
    relu = n * 4 * 8 * 8  # 1 per output element
    pool = (n * 4) * (8 * 8)  # kernel (the whole 8x8 plane) per output element
    gemm = 2 * (n * 10) * 4  # 2 x output elements x K
    weights = (4 * 3 * 3 * 3 + 4 + 4 * 10 + 10) * 4
    return ModelCost(float(conv + relu + pool + gemm), float(weights + n * 3 * 8 * 8 * 4 + n * 10 * 4))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "backbone.onnx"
    onnx.save(tiny_model(), path)
    return path


@pytest.fixture
def session(model_path):
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    yield session
    lp_ort.uninstrument_session(session)
    lp_ort.uninstrument()


def feed(n: int) -> dict:
    return {"x": np.ones((n, 3, 8, 8), np.float32)}


def test_model_cost_matches_hand_counts(model_path):
    model = tiny_model()
    for n in (1, 2, 7):
        assert model_cost(model, {"x": (n, 3, 8, 8)}) == hand_cost(n)
    # Exact for the conv and matmul terms: they dominate, and every rule is linear in the batch.
    assert model_cost(str(model_path), {"x": (2, 3, 8, 8)}) == hand_cost(2)
    assert model_cost(model.SerializeToString(), {"x": (2, 3, 8, 8)}) == hand_cost(2)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"  # the caller's model untouched


def test_model_cost_of_matmul_convtranspose_pooling_and_unknown_ops():
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["ab"]),  # [2,5,6] x [6,3] -> [2,5,3]
        helper.make_node("Transpose", ["ab"], ["t"], perm=[0, 2, 1]),  # data movement: 0
        helper.make_node("Unsqueeze", ["t", "axis"], ["img"]),  # [2,3,5] -> [2,1,3,5]
        helper.make_node("ConvTranspose", ["img", "w"], ["up"], strides=[2, 2]),  # 1 -> 2 channels
        helper.make_node("MaxPool", ["up"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "mix",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((6, 3), np.float32), "b"),
         numpy_helper.from_array(np.array([1], np.int64), "axis"),
         numpy_helper.from_array(np.ones((1, 2, 3, 3), np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # ConvTranspose [2,1,3,5], kernel 3, stride 2 -> [2,2,7,11]; MaxPool 2x2 -> [2,2,3,5]
    matmul = 2 * (2 * 5 * 3) * 6
    conv_transpose = 2 * (2 * 1 * 3 * 5) * (2 * 3 * 3)  # 2 x input elements x C_out x kernel
    pool = (2 * 2 * 3 * 5) * 4
    weights = 6 * 3 * 4 + 8 + 2 * 9 * 4
    cost = model_cost(model, {"a": (2, 5, 6)})
    assert cost == ModelCost(float(matmul + conv_transpose + pool), float(weights + 2 * 5 * 6 * 4 + 2 * 2 * 3 * 5 * 4))


def test_load_graph_keeps_dims_and_drops_weight_data():
    big = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
        [numpy_helper.from_array(np.ones((64, 64), np.float32), "w")],
    )
    model = helper.make_model(big, opset_imports=[helper.make_opsetid("", 17)])
    graph = load_graph(model)
    assert list(graph.graph.initializer[0].dims) == [64, 64] and not graph.graph.initializer[0].raw_data
    assert model.graph.initializer[0].raw_data  # the original keeps its weights
    assert model_cost(graph, {"x": (3, 64)}) == model_cost(model, {"x": (3, 64)})


def test_instrument_session_records_each_run_with_graph_costs(recorder, session, model_path):
    assert lp_ort.instrument_session(session, stage="detector") is session
    lp_ort.instrument_session(session, stage="detector")  # again: still one span per run
    with request(id="req-1"):
        (out,) = session.run(None, feed(2))
    session.run(["y"], input_feed=feed(3))
    assert out.shape == (2, 10)
    rows = stopped_spans(recorder)
    spans = by_stage(rows)["detector"]
    assert [(r["batch"], r["shape"], r["engine"], r["status"]) for r in spans] == [
        (2, "2x3x8x8", "cpu", "ok"), (3, "3x3x8x8", "cpu", "ok")]
    for row, n in zip(spans, (2, 3)):
        cost = model_cost(str(model_path), {"x": (n, 3, 8, 8)})
        assert (row["flops"], row["bytes"]) == (cost.flops, cost.bytes) == hand_cost(n)
    root = by_stage(rows)["request"][0]
    assert (spans[0]["parent_id"], spans[0]["request_id"]) == (root["span_id"], "req-1")


def test_global_instrument_names_spans_after_the_model_file_and_uninstrument_restores(recorder, session, model_path):
    lp_ort.instrument()
    lp_ort.instrument()
    session.run(None, feed(1))
    ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, feed(4))
    lp_ort.instrument_session(session, stage="own")  # instrumented both ways: still one span
    session.run(None, feed(2))
    lp_ort.uninstrument_session(session)
    lp_ort.uninstrument()
    lp_ort.uninstrument()
    session.run(None, feed(5))
    assert "run" not in ort.InferenceSession.__dict__ and "run" not in session.__dict__
    rows = stopped_spans(recorder)
    assert [(r["stage"], r["batch"]) for r in rows] == [("backbone", 1), ("backbone", 4), ("own", 2)]
    assert all(r["flops"] == hand_cost(r["batch"]).flops for r in rows)


def test_errors_pass_through_unchanged_and_mark_the_span(recorder, session):
    wrong_rank = {"x": np.ones((2, 5), np.float32)}
    with pytest.raises(Exception) as plain:
        session.run(None, wrong_rank)
    lp_ort.instrument_session(session)
    with pytest.raises(type(plain.value)) as traced:
        session.run(None, wrong_rank)
    assert str(traced.value) == str(plain.value)
    assert recorder.stats().extractor_errors == 1  # shape inference refused the shapes: no flops, counted
    (row,) = stopped_spans(recorder)
    assert (row["stage"], row["status"], row["shape"], row["flops"]) == ("backbone", "error", "2x5", None)


def test_without_a_recorder_runs_are_plain_calls(session):
    lp_ort.instrument()
    lp_ort.instrument_session(session)
    (out,) = session.run(None, feed(2))
    assert out.shape == (2, 10)
    assert _buffers.buffered() == 0


@pytest.mark.parametrize(("provider", "options", "engine"), [
    ("CPUExecutionProvider", {}, "cpu"),
    ("CUDAExecutionProvider", {"device_id": "1"}, "gpu1"),
    ("CUDAExecutionProvider", None, "gpu0"),
    ("TensorrtExecutionProvider", {"device_id": "2"}, "gpu2"),
    ("DmlExecutionProvider", {"device_id": "0"}, "gpu0"),
    ("CANNExecutionProvider", {"device_id": "3"}, "npu3"),
    ("OpenVINOExecutionProvider", {"device_type": "GPU"}, "openvino"),
    ("CoreMLExecutionProvider", {}, "coreml"),
    ("XnnpackExecutionProvider", {}, "xnnpack"),
])
def test_provider_engines(provider, options, engine):
    assert lp_ort.provider_engine(provider, options) == engine


@pytest.mark.parametrize(("module", "adapter"), [
    ("onnxruntime", "loadprobe.instrumentation.onnxruntime"),
    ("onnx", "loadprobe.instrumentation.onnx_cost"),
])
def test_a_missing_framework_names_the_extra_to_install(module, adapter):
    result = run_python(
        "import sys\n"
        f"sys.modules[{module!r}] = None\n"
        "try:\n"
        f"    import {adapter}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'loadprobe[onnxruntime]'" in result.stdout


def test_the_adapter_loads_no_offline_capture_code_into_the_service():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys; from loadprobe.instrumentation import onnxruntime as o; "
                          "print('loadprobe.align' in sys.modules); o.capture; print('loadprobe.align' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr  # align's capture loads when first asked for
