"""The inspection backbone: a small convolutional network generated as ONNX, FP32 and INT8.

Usage::

    fp32, int8 = ensure_models()           # built once, cached under ~/.cache/loadprobe/vision
    session = open_session(fp32)
    features = session.run(None, {INPUT: batch})[0]    # (N, 3, 160, 160) -> (N, 64, 20, 20)

The weights come from a fixed seed (He initialisation), so every machine builds the same
model without downloading anything. The INT8 variant is made by ONNX Runtime's static
quantisation (QDQ, per-channel weights) calibrated on generated inspection images.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import numpy as np

from loadprobe._files import pending_file, write_file

from .shapes import CHANNELS, GRID, SIZE, STRIDES

INPUT, OUTPUT = "images", "features"
MODEL_VERSION = "2"  # bump when the architecture or the quantisation changes, so caches rebuild


def cache_dir() -> Path:
    """Where generated models live: $LOADPROBE_CACHE/vision, else ~/.cache/loadprobe/vision."""
    root = os.environ.get("LOADPROBE_CACHE") or Path.home() / ".cache" / "loadprobe"
    return Path(root) / "vision"


def build_fp32(path: Path) -> Path:
    """Write the FP32 backbone: four 3x3 convolutions with ReLU, dynamic batch, fixed 160x160."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    nodes, inits = [], []
    prev = INPUT
    for i, (c_in, c_out, stride) in enumerate(zip(CHANNELS[:-1], CHANNELS[1:], STRIDES)):
        w = (rng.standard_normal((c_out, c_in, 3, 3)) * np.sqrt(2.0 / (c_in * 9))).astype(np.float32)
        b = np.zeros(c_out, np.float32)
        inits += [numpy_helper.from_array(w, f"conv{i}.w"), numpy_helper.from_array(b, f"conv{i}.b")]
        out = OUTPUT if i == len(STRIDES) - 1 else f"act{i}"
        nodes.append(helper.make_node("Conv", [prev, f"conv{i}.w", f"conv{i}.b"], [f"conv{i}"],
                                      kernel_shape=[3, 3], strides=[stride, stride], pads=[1, 1, 1, 1],
                                      name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [out], name=f"relu{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, "inspection_backbone",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["N", CHANNELS[-1], GRID, GRID])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="loadprobe")
    model.ir_version = 8
    onnx.checker.check_model(model)
    write_file(path, model.SerializeToString())  # several servers may build the cache at once
    return path


def build_int8(fp32: Path, path: Path, calibration: np.ndarray, *, exclude: list[str] | None = None) -> Path:
    """Statically quantise ``fp32`` to INT8 (QDQ), calibrated on ``calibration`` (N, 3, 160, 160).

    ``exclude`` names nodes to keep in float, e.g. the layers with the largest error.
    """
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter([{INPUT: calibration[i:i + 1]} for i in range(len(calibration))])

        def get_next(self):
            return next(self._batches, None)

    with pending_file(path) as tmp, _quiet_root_logger():  # ORT advises "pre-processing" on the root logger
        # reduce_range: 7-bit weights. Without it, ONNX Runtime's u8s8 kernels on x86 CPUs without VNNI
        # (AVX2 only) saturate their 16-bit intermediate sums: the same model measured 16 dB of output SQNR on
        # such a machine against ~25 elsewhere. With it the sample's INT8 error is the same on every CPU.
        quantize_static(str(fp32), str(tmp), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        reduce_range=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=list(exclude or []))
    return path


def ensure_models(directory: Path | None = None) -> tuple[Path, Path]:
    """Paths of the FP32 and INT8 models, building whichever is missing."""
    directory = Path(directory or cache_dir())
    directory.mkdir(parents=True, exist_ok=True)
    fp32 = directory / f"backbone-v{MODEL_VERSION}-fp32.onnx"
    int8 = directory / f"backbone-v{MODEL_VERSION}-int8.onnx"
    if not fp32.exists():
        build_fp32(fp32)
    if not int8.exists():
        build_int8(fp32, int8, calibration_batch(32))
    return fp32, int8


def calibration_batch(n: int, seed: int = 11) -> np.ndarray:
    """``n`` preprocessed inspection images, the kind the service sees."""
    from .images import inspection_jpegs
    from .pipeline import decode, preprocess

    return np.stack([preprocess(decode(jpeg))[0] for jpeg in inspection_jpegs(n, seed=seed)])


def open_session(path: Path, threads: int = 1):
    """An ONNX Runtime CPU session for ``path`` with ``threads`` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def _quiet_root_logger():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
