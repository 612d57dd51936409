"""Capture files: chosen layer outputs of a model over a fixed sample set, kept small.

The framework adapters (``loadprobe.instrumentation.torch.capture``,
``loadprobe.instrumentation.onnxruntime.capture``) run a model over the samples and hand each
batch of layer outputs to a :class:`CaptureWriter`; ``loadprobe align`` reads two captures back
with :func:`load_capture` and compares them layer by layer.

Usage::

    writer = CaptureWriter("onnxruntime", "backbone.onnx", n_samples=16, digest=samples_digest([x]))
    writer.declare("act0", nodes=["conv0", "relu0"], op="Relu", inputs=[])
    writer.add("act0", batch_of_act0)            # (batch, ...) arrays, in sample order
    writer.save("fp32.npz")                      # refuses to replace an existing file
    capture = load_capture("fp32.npz")
    capture.layer("act0").shape, capture.data("act0").proj

What is stored per layer and sample: the exact values when a sample's output has at most
``EXACT_MAX_VALUES`` of them; otherwise a summary -- per-channel mean, standard deviation,
minimum and maximum (channels on the axis after the batch) and a fixed random projection of
the values less their channel's mean to ``PROJECTION_DIMS`` values. The statistics give each
sample's squared length and the part of a difference that lies in the channel means exactly;
the projection gives the rest. It is linear and the same for every capture with the same
settings, so the projection of a difference is the difference of the projections, and its
length approximates the full difference's (Johnson-Lindenstrauss): relative errors and cosines
computed this way are estimates, within a few percent for the 256 dimensions used here, and
closer once averaged over samples. It is built in two stages so that it costs
O(values) per sample instead of a dense (values x 256) matrix: each value is added, with a
random sign, to one of ``SKETCH_BUCKETS`` buckets (a count sketch, which preserves squared
lengths in expectation), then the buckets are multiplied by a seeded Gaussian matrix.

File format (version 1): a NumPy ``.npz`` archive holding ``meta`` (UTF-8 JSON as uint8) and,
for layer ``i`` of ``meta["layers"]``, either ``L{i}.x`` (samples x values, float32) or
``L{i}.p`` (samples x PROJECTION_DIMS, float32: the projection of the values less their
channel's mean) and ``L{i}.s`` (samples x channels x 4: mean, population standard deviation,
min, max, float32). It loads without pickle.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .._errors import LoadprobeError
from .._files import pending_file
from .._version import __version__
from ..formats import CAPTURE

__all__ = ["Capture", "CaptureWriter", "LayerData", "LayerInfo", "channel_stats", "load_capture", "project",
           "samples_digest", "summarise"]

FORMAT = "loadprobe-capture"
VERSION = CAPTURE.value
EXACT_MAX_VALUES = 4096  # values per sample stored as they are
PROJECTION_DIMS = 256
PROJECTION_SEED = 20240509  # fixed: captures made anywhere compare
SKETCH_BUCKETS = 8192
MAX_CHANNELS = 4096  # more channels than this are summarised as one
STATS = ("mean", "std", "min", "max")


@dataclass
class LayerInfo:
    """One captured layer: a named output, where it comes from, and how it is stored.

    ``nodes`` are the framework's names for what computes it (ONNX nodes between the nearest
    captured layers, or the torch module), ``inputs`` the captured layers it is computed
    from (empty: from the model's inputs), ``output`` whether it is a model output.
    """

    name: str
    nodes: tuple = ()
    op: str = ""
    inputs: tuple = ()
    output: bool = False
    shape: tuple = ()  # per sample, without the batch dimension
    dtype: str = "float32"
    exact: bool = True
    channels: int = 1

    def to_json(self) -> dict:
        return {"name": self.name, "nodes": list(self.nodes), "op": self.op, "inputs": list(self.inputs),
                "output": self.output, "shape": list(self.shape), "dtype": self.dtype,
                "summary": "exact" if self.exact else "projected", "channels": self.channels}

    @classmethod
    def from_json(cls, d: dict) -> LayerInfo:
        return cls(str(d["name"]), tuple(d.get("nodes") or ()), str(d.get("op") or ""), tuple(d.get("inputs") or ()),
                   bool(d.get("output")), tuple(int(x) for x in d["shape"]), str(d.get("dtype") or "float32"),
                   d.get("summary", "exact") == "exact", int(d.get("channels") or 1))


@dataclass
class LayerData:
    """A layer's stored arrays: ``values`` (exact), or ``proj`` and ``stats`` (summarised)."""

    values: np.ndarray | None = None  # (samples, values)
    proj: np.ndarray | None = None  # (samples, PROJECTION_DIMS)
    stats: np.ndarray | None = None  # (samples, channels, 4)


@dataclass
class Capture:
    """A capture file, loaded: its metadata and every layer's arrays."""

    path: str
    framework: str
    model: str
    samples: int
    digest: str
    selection: object  # "all" or the list of names asked for
    projection: dict
    layers: list
    arrays: dict = field(repr=False, default_factory=dict)  # name -> LayerData
    meta: dict = field(repr=False, default_factory=dict)

    def layer(self, name: str) -> LayerInfo:
        return self._by_name()[name]

    def data(self, name: str) -> LayerData:
        return self.arrays[name]

    def names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    def _by_name(self) -> dict:
        return {layer.name: layer for layer in self.layers}


class CaptureWriter:
    """Collects layer outputs batch by batch and writes one capture file.

    Layers are declared in the order the model computes them; a layer's per-sample shape is
    fixed by its first batch. Only the summaries are kept in memory, never whole outputs of
    summarised layers.
    """

    def __init__(self, framework: str, model: str, *, n_samples: int, digest: str, selection="all",
                 extra: dict | None = None) -> None:
        self.framework, self.model, self.n_samples, self.digest = framework, model, int(n_samples), digest
        self.selection = selection
        self.extra = dict(extra or {})
        self.infos: dict[str, LayerInfo] = {}
        self._parts: dict[str, list] = {}
        self._seen: dict[str, int] = {}

    def declare(self, name: str, *, nodes=(), op: str = "", inputs=(), output: bool = False) -> None:
        if name in self.infos:
            raise LoadprobeError(f"layer {name!r} is declared twice in one capture")
        self.infos[name] = LayerInfo(name, tuple(nodes), op, tuple(inputs), output)
        self._parts[name], self._seen[name] = [], 0

    def add(self, name: str, batch) -> None:
        """Add the outputs of layer ``name`` for the next samples: an array shaped (batch, ...)."""
        info = self.infos[name]
        array = np.asarray(batch)
        if array.ndim == 0:
            raise LoadprobeError(f"layer {name!r}: its output is a scalar, not one value per sample; "
                                 "capture a layer whose output has the batch as its first dimension")
        shape = tuple(int(d) for d in array.shape[1:])
        if self._seen[name] == 0:
            info.shape = shape
            info.dtype = str(array.dtype)
            values = math.prod(shape)
            info.exact = values <= EXACT_MAX_VALUES
            info.channels = shape[0] if len(shape) >= 2 and shape[0] <= MAX_CHANNELS else 1
        elif shape != info.shape:
            raise LoadprobeError(f"layer {name!r}: a sample's output is {_dims(shape)} in one batch and "
                                 f"{_dims(info.shape)} in an earlier one; a capture needs one shape per layer "
                                 "(feed samples of one size)")
        flat = array.reshape(array.shape[0], -1).astype(np.float32, copy=False)
        if info.exact:
            self._parts[name].append(np.array(flat, dtype=np.float32))
        else:
            self._parts[name].append(summarise(flat, info.channels))
        self._seen[name] += array.shape[0]

    def save(self, path, *, overwrite: bool = False) -> Path:
        """Write the file (through a temporary file and a rename); returns its path."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise LoadprobeError(f"{path} exists; choose another file or pass overwrite=True (--force) to replace it")
        if path.is_dir():
            raise LoadprobeError(f"{path} is a directory; give a file name such as {path / 'capture.npz'}")
        arrays: dict[str, np.ndarray] = {}
        layers = []
        for i, (name, info) in enumerate(self.infos.items()):
            if self._seen[name] != self.n_samples:
                raise LoadprobeError(f"layer {name!r} produced outputs for {self._seen[name]} of {self.n_samples} "
                                     "samples; it must run once per sample (a layer the model skips for some inputs "
                                     "cannot be captured)")
            parts = self._parts[name]
            if info.exact:
                arrays[f"L{i}.x"] = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
            else:
                arrays[f"L{i}.p"] = np.concatenate([p for p, _ in parts])
                arrays[f"L{i}.s"] = np.concatenate([s for _, s in parts])
            layers.append(info.to_json())
        meta = {"format": FORMAT, "version": VERSION, "framework": self.framework, "model": self.model,
                "samples": self.n_samples, "samples_digest": self.digest, "selection": self.selection,
                "exact_max_values": EXACT_MAX_VALUES,
                "projection": {"dims": PROJECTION_DIMS, "seed": PROJECTION_SEED, "sketch_buckets": SKETCH_BUCKETS},
                "layers": layers, "created_by": f"loadprobe {__version__}",
                "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **self.extra}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
        path.parent.mkdir(parents=True, exist_ok=True)
        with pending_file(path, overwrite=overwrite) as tmp, open(tmp, "xb") as f:
            np.savez(f, **arrays)
        return path


def load_capture(path) -> Capture:
    """Read a capture file; a LoadprobeError names the file and what is wrong with it."""
    path = Path(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise LoadprobeError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise LoadprobeError(f"{path}: not a capture file ({exc}); make one with loadprobe.instrumentation."
                             "torch.capture or loadprobe.instrumentation.onnxruntime.capture") from None
    with archive:
        if not hasattr(archive, "files") or "meta" not in archive.files:
            raise LoadprobeError(f"{path}: not a loadprobe capture (no metadata); make one with "
                                 "loadprobe.instrumentation.torch.capture or .onnxruntime.capture")
        try:
            meta = json.loads(archive["meta"].tobytes().decode("utf-8"))
        except ValueError as exc:
            raise LoadprobeError(f"{path}: its metadata is not readable JSON ({exc}); capture again") from None
        if meta.get("format") != FORMAT:
            raise LoadprobeError(f"{path}: not a loadprobe capture (format {meta.get('format')!r})")
        CAPTURE.refuse_newer(meta.get("version"), str(path))  # newer: upgrade; older or damaged: capture again
        if meta.get("version") != VERSION:
            raise LoadprobeError(f"{path}: capture format version {meta.get('version')!r}; this loadprobe reads "
                                 f"version {VERSION}: capture again with this version")
        try:
            layers = [LayerInfo.from_json(d) for d in meta["layers"]]
            n = int(meta["samples"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LoadprobeError(f"{path}: its metadata lacks a field ({exc}); capture again") from None
        arrays = {}
        for i, info in enumerate(layers):
            arrays[info.name] = _layer_arrays(path, archive, i, info, n, meta)
    return Capture(str(path), str(meta.get("framework")), str(meta.get("model")), n,
                   str(meta.get("samples_digest")), meta.get("selection", "all"), dict(meta.get("projection") or {}),
                   layers, arrays, meta)


def _layer_arrays(path, archive, i: int, info: LayerInfo, n: int, meta: dict) -> LayerData:
    values = math.prod(info.shape)
    dims = int((meta.get("projection") or {}).get("dims", PROJECTION_DIMS))
    try:
        if info.exact:
            data = LayerData(values=archive[f"L{i}.x"])
            expected = {"values": (n, values)}
        else:
            data = LayerData(proj=archive[f"L{i}.p"], stats=archive[f"L{i}.s"])
            expected = {"proj": (n, dims), "stats": (n, info.channels, len(STATS))}
    except KeyError as exc:
        raise LoadprobeError(f"{path}: layer {info.name!r} has no {exc.args[0]} array; the file is incomplete: "
                             "capture again") from None
    for attr, shape in expected.items():
        got = getattr(data, attr).shape
        if got != shape:
            raise LoadprobeError(f"{path}: layer {info.name!r}: {attr} array is {_dims(got)}, expected {_dims(shape)} "
                                 "from the metadata; the file is damaged: capture again")
    return data


# -- summaries -------------------------------------------------------------------------


def summarise(flat: np.ndarray, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(samples, values) -> (projection of the values less their channel's mean, channel statistics).

    The means are taken out before projecting because they are known exactly from the
    statistics, and because a component every sample shares (a mean, a bias) would make the
    projection's random distortion the same for every sample instead of averaging out.
    """
    stats = channel_stats(flat, channels)
    with np.errstate(all="ignore"):
        centred = (flat.reshape(flat.shape[0], channels, -1) - stats[:, :, :1]).reshape(flat.shape)
    return project(centred), stats


def project(flat: np.ndarray) -> np.ndarray:
    """(samples, values) -> (samples, PROJECTION_DIMS): the fixed random projection, float32."""
    n, d = flat.shape
    gauss = _gaussian()
    with np.errstate(all="ignore"):  # NaN and inf pass through; align reports them by layer
        if d <= SKETCH_BUCKETS:
            out = flat.astype(np.float64) @ gauss[:d]
        else:
            index, sign = _sketch(d)
            buckets = np.empty((n, SKETCH_BUCKETS))
            for row in range(n):
                buckets[row] = np.bincount(index, weights=flat[row] * sign, minlength=SKETCH_BUCKETS)
            out = buckets @ gauss
    return (out / math.sqrt(PROJECTION_DIMS)).astype(np.float32)


def channel_stats(flat: np.ndarray, channels: int) -> np.ndarray:
    """(samples, values) -> (samples, channels, 4): per-channel mean, std, min, max."""
    per = flat.reshape(flat.shape[0], channels, -1)
    with np.errstate(all="ignore"):
        out = np.stack([per.mean(axis=2), per.std(axis=2), per.min(axis=2), per.max(axis=2)], axis=2)
    return out.astype(np.float32)


@functools.lru_cache(maxsize=1)
def _gaussian() -> np.ndarray:
    return np.random.default_rng(PROJECTION_SEED).standard_normal((SKETCH_BUCKETS, PROJECTION_DIMS))


@functools.lru_cache(maxsize=64)
def _sketch(values: int) -> tuple[np.ndarray, np.ndarray]:
    # Seeded by the size alone: two captures of a layer of the same size use the same sketch.
    rng = np.random.default_rng([PROJECTION_SEED, values])
    index = rng.integers(0, SKETCH_BUCKETS, values)
    sign = rng.integers(0, 2, values).astype(np.float32) * 2 - 1
    return index, sign


def samples_digest(arrays) -> str:
    """A digest of the sample inputs, at FP16 precision for floats.

    Rounding to FP16 first means a FP16 model fed the same samples cast to FP16 gets the
    same digest as the FP32 model, while different samples do not.
    """
    h = hashlib.sha256()
    for array in arrays:
        a = np.ascontiguousarray(array)
        if a.dtype.kind == "f":
            with np.errstate(all="ignore"):
                a = a.astype(np.float16)
        elif a.dtype.kind in "iub":
            a = a.astype(np.int64)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape) or "a scalar"
