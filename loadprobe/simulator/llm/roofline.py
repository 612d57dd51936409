"""An LLM's step time on a device it never ran on: the model's shape against the catalog's roofline.

A step (``steps.StepModel``) reads every weight once and each running sequence's KV cache
(memory: bytes over bandwidth) and computes two FLOPs per parameter for every token it carries,
plus the prompt's attention over itself (compute: FLOPs over peak). Memory and compute overlap
within a pass, so the pass takes the larger of the two (``StepModel.roofline``), plus the engine's
own work per iteration (scheduling, sampling: host time the roofline does not see). The roofs are
taken at ``BANDWIDTH_EFFICIENCY`` and ``COMPUTE_EFFICIENCY`` of the published peaks: what
AIConfigurator's measured kernel database for vLLM implies on two GPUs (A100 SXM, H100 SXM), held
within 11% (RMS; worst x1.27) on two it was not fitted to (H200, L40S) -- benchmarks/llm_roofline.py.
The estimate still carries the error bound of every unmeasured time (``ESTIMATE_ERROR``), as other
devices and engines may reach less of their peaks; a recording of the engine on that device replaces
it (``loadprobe verify --calibrate``).

A model too large for one device runs tensor-parallel over 2, 4 or 8 of them (a "unit"): the
smallest group whose memory holds the weights and room for the KV cache; the group's bandwidth and
FLOPs add up, and each pass ends every layer's attention and MLP with an all-reduce of its tokens'
activations over the devices' link (the catalog's ``interconnect_bytes_per_s``): a ring's
2 (n - 1) / n of the message at ``LINK_EFFICIENCY`` of the link, plus ``ALLREDUCE_LATENCY_US`` each --
both fitted to AIConfigurator's measured vLLM all-reduce on NVLink (A100, H100), held on H200 and on
two L40S over PCIe; past two devices over PCIe a server may be far slower (the plan says so).

Usage::

    shape = model_shape("llama-3.1-8b")                 # or a Hugging Face config.json
    unit = on_device(shape, catalog.get("nvidia-l4"), longest=4096)
    unit.tp, unit.kv_tokens, unit.steps.step_ns(sequences=32, context_tokens=32 * 1500)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..._errors import LoadprobeError
from ...catalog import PRECISION_BYTES
from ...estimate.servicetime import ESTIMATE_ERROR
from .steps import StepModel

BANDWIDTH_EFFICIENCY = 0.70  # of the published memory bandwidth a decode pass reaches (benchmarks/llm_roofline.py)
COMPUTE_EFFICIENCY = 0.75  # of the published dense 16-bit FLOP/s a prefill pass reaches (the same fit)
LINK_EFFICIENCY = 0.31  # of the link's published bandwidth a ring all-reduce's bus reaches (the same database)
ALLREDUCE_LATENCY_US = 6.0  # each all-reduce's fixed time (the same fit; 4-6 us measured on NVLink)
MEMORY_SHARE = 0.9  # of a unit's memory the engine may use (vLLM's --gpu-memory-utilization default)
TENSOR_PARALLEL = (1, 2, 4, 8)
ENGINE_STEP_MS = 2.0
"""The engine's own work per iteration on an accelerator (scheduling, sampling, launching): an assumption
where nothing was recorded; a recording of the engine gives its own (``on_device(..., step_ms=)``)."""
PRECISION_ORDER = ("bf16", "fp16", "fp32")  # the precision a model is served at: the first the device has

# Published architectures (each model's config.json on Hugging Face): hidden size, layers, attention and
# KV heads, MLP width, vocabulary, tied embeddings.
PRESETS = {
    "llama-3.1-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False,
                         source="https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json"),
    "llama-3.1-70b": dict(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                          intermediate_size=28672, vocab_size=128256, tie_word_embeddings=False,
                          source="https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json"),
    "qwen2.5-7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       intermediate_size=18944, vocab_size=152064, tie_word_embeddings=False,
                       source="https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json"),
}


@dataclass(frozen=True)
class ModelShape:
    """What a decoder-only transformer's serving costs are made of."""

    name: str
    params: float  # every weight, read once per step
    active_params: float  # those a token goes through (a mixture of experts: fewer)
    layers: int
    attention_width: int  # attention heads x head size
    kv_width: int  # KV heads x head size
    source: str
    hidden: int = 0  # the residual stream's width, what a tensor-parallel all-reduce carries per token (0: attention's)

    @property
    def width(self) -> int:
        return self.hidden or self.attention_width

    def weights_bytes(self, precision: str) -> float:
        return self.params * PRECISION_BYTES[precision]

    def kv_bytes_per_token(self, precision: str) -> float:
        return 2 * self.layers * self.kv_width * PRECISION_BYTES[precision]  # a key and a value per layer

    def to_dict(self) -> dict:
        return {"name": self.name, "params": self.params, "active_params": self.active_params, "layers": self.layers,
                "attention_width": self.attention_width, "kv_width": self.kv_width, "hidden": self.width,
                "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "ModelShape":
        return cls(name=str(d["name"]), params=float(d["params"]), active_params=float(d["active_params"]),
                   layers=int(d["layers"]), attention_width=int(d["attention_width"]), kv_width=int(d["kv_width"]),
                   source=str(d.get("source", "")), hidden=int(d.get("hidden") or 0))


def model_shape(name_or_path: str) -> ModelShape:
    """A preset's shape (``PRESETS``) or a Hugging Face ``config.json``'s; bad input raises one clear line."""
    if name_or_path in PRESETS:
        config = dict(PRESETS[name_or_path])
        return _shape(name_or_path, config, config.pop("source"))
    path = Path(name_or_path)
    if not path.is_file():
        raise LoadprobeError(f"--model {name_or_path}: expected a model's config.json (Hugging Face format) or one of "
                             f"{', '.join(PRESETS)}")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoadprobeError(f"--model {path}: not readable as JSON ({e}); give the model's config.json") from None
    if not isinstance(config, dict):
        raise LoadprobeError(f"--model {path}: expected a JSON object (a model's config.json)")
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    return _shape(str(config.get("_name_or_path") or path.parent.name or path.stem), config, str(path))


def _shape(name: str, c: dict, source: str) -> ModelShape:
    def number(key: str, default=None) -> int:
        value = c.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise LoadprobeError(f"--model {source}: field {key!r} must be a positive number, got {value!r}; "
                                 "a decoder-only transformer's config.json has it")
        return int(value)

    hidden, layers, heads = number("hidden_size"), number("num_hidden_layers"), number("num_attention_heads")
    kv_heads = number("num_key_value_heads", heads)
    head = number("head_dim", hidden // heads) if c.get("head_dim") is not None else hidden // heads
    mlp, vocab = number("intermediate_size"), number("vocab_size")
    experts = int(c.get("num_local_experts") or c.get("num_experts") or 1)
    routed = int(c.get("num_experts_per_tok") or experts) if experts > 1 else 1
    attention = hidden * heads * head * 2 + hidden * kv_heads * head * 2  # Q and O, K and V
    per_expert = 3 * hidden * mlp  # a gated MLP: gate, up, down
    embed = vocab * hidden * (1 if c.get("tie_word_embeddings", False) else 2)
    params = float(c["num_parameters"]) if isinstance(c.get("num_parameters"), (int, float)) else float(
        layers * (attention + experts * per_expert) + embed)
    active = params - layers * (experts - routed) * per_expert
    return ModelShape(name=name, params=params, active_params=active, layers=layers, attention_width=heads * head,
                      kv_width=kv_heads * head, source=source, hidden=hidden)


@dataclass(frozen=True)
class Unit:
    """One engine replica of a model on a catalog device: ``tp`` devices, its KV cache, its estimated steps."""

    device: str
    tp: int
    precision: str
    kv_tokens: int
    steps: StepModel
    figures: dict  # FLOP/s, bytes/s, memory, and the per-token costs the steps came from


def serving_precision(device) -> str | None:
    return next((p for p in PRECISION_ORDER if device.peak(p)), None)


def on_device(shape: ModelShape, device, *, longest: int, step_ms: float = ENGINE_STEP_MS) -> Unit:
    """The smallest tensor-parallel group of ``device`` holding ``shape``'s weights and the KV cache of the
    ``longest`` request, with its roofline step model; LoadprobeError saying why where none does."""
    precision = serving_precision(device)
    bandwidth, memory = device.memory_bandwidth_bytes_per_s, device.memory_bytes
    if precision is None or not bandwidth or not memory:
        missing = [name for name, v in (("a bf16, fp16 or fp32 peak", precision), ("its memory bandwidth", bandwidth),
                                        ("its memory size", memory)) if not v]
        raise LoadprobeError(f"{device.id}: the catalog lacks {', '.join(missing)}, which an LLM's roofline needs; "
                             "add them with --catalog")
    weights, kv = shape.weights_bytes(precision), shape.kv_bytes_per_token(precision)
    for tp in TENSOR_PARALLEL:
        room = memory * tp * MEMORY_SHARE - weights
        if room >= kv * longest:
            break
    else:
        raise LoadprobeError(f"{device.id}: {TENSOR_PARALLEL[-1]} of them hold {memory * TENSOR_PARALLEL[-1] * MEMORY_SHARE / 1e9:,.0f} GB "
                             f"at {MEMORY_SHARE:.0%}, less than {shape.name}'s weights ({weights / 1e9:,.1f} GB at "
                             f"{precision}) and one {longest:,}-token request's KV cache ({kv * longest / 1e9:,.2f} GB)")
    flops = device.peak(precision) * tp * COMPUTE_EFFICIENCY
    read = bandwidth * tp * BANDWIDTH_EFFICIENCY
    link_ns, link_per_token, link_note = _all_reduces(shape, device, tp, precision)
    steps = StepModel(iteration=step_ms * 1e6, per_prefill=0.0, per_prompt_token=2 * shape.active_params / flops * 1e9,
                      per_prompt_token_sq=2 * shape.layers * shape.attention_width / flops * 1e9,
                      per_sequence=2 * shape.active_params / flops * 1e9, per_context_token=kv / read * 1e9,
                      weights_ns=weights / read * 1e9, roofline=True, link_ns=link_ns, link_per_token=link_per_token,
                      source=f"roofline of {tp} x {device.id} at {precision}, {COMPUTE_EFFICIENCY:.0%} of peak FLOP/s "
                             f"and {BANDWIDTH_EFFICIENCY:.0%} of peak bandwidth (within {ESTIMATE_ERROR:g}x either way)")
    figures = {"flops_per_s": device.peak(precision) * tp, "bytes_per_s": bandwidth * tp, "memory_bytes": memory * tp,
               "weights_bytes": weights, "kv_bytes_per_token": kv, "compute_efficiency": COMPUTE_EFFICIENCY,
               "bandwidth_efficiency": BANDWIDTH_EFFICIENCY,
               "error_factor": ESTIMATE_ERROR, "engine_step_ms": step_ms,
               "interconnect_bytes_per_s": device.interconnect_bytes_per_s, "tensor_parallel_note": link_note}
    return Unit(device=device.id, tp=tp, precision=precision, kv_tokens=int(room // kv), steps=steps, figures=figures)


NVLINK_BYTES_PER_S = 100e9
"""Links at least this fast each way are a GPU-to-GPU fabric (NVLink and the like); slower ones a PCIe slot."""


def _all_reduces(shape: ModelShape, device, tp: int, precision: str) -> tuple[float, float, str]:
    """(ns per pass, ns per token, a note) of a ``tp``-device unit's all-reduces: two per layer (after attention,
    after the MLP), each of the pass's tokens' activations."""
    if tp == 1:
        return 0.0, 0.0, ""
    link = device.interconnect_bytes_per_s
    if not link:
        return 0.0, 0.0, (f"tensor-parallel over {tp}: the catalog gives {device.id} no link between devices "
                          "(interconnect_bytes_per_s), so the all-reduces are not counted")
    count = 2 * shape.layers
    per_token = count * 2 * (tp - 1) / tp * shape.width * PRECISION_BYTES[precision] / (link * LINK_EFFICIENCY) * 1e9
    note = (f"tensor-parallel over {tp}: {count} all-reduces per pass over {link / 1e9:,.3g} GB/s each way "
            f"(each {ALLREDUCE_LATENCY_US:g} us + the tokens' activations at {LINK_EFFICIENCY:.0%} of the link)")
    if tp > 2 and link < NVLINK_BYTES_PER_S:
        note += ("; over PCIe past two devices a server without peer-to-peer runs them through the host, up to "
                 "10x slower (measured on 4 and 8 L40S), so this unit may be much slower than estimated")
    return count * ALLREDUCE_LATENCY_US * 1e3, per_token, note


def ridge_note(unit: Unit) -> str:
    """Where the unit's prefill turns from bandwidth- to compute-bound: the tokens per pass at which two FLOPs per
    parameter per token take as long as reading the weights."""
    s = unit.steps
    return f"compute-bound past ~{math.ceil(s.weights_ns / max(s.per_prompt_token, 1e-12)):,} tokens per pass"
