"""An LLM's step time on a device it never ran on: the model's shape against the catalog's roofline.

A step (``steps.StepModel``) reads every weight once and each running sequence's KV cache
(memory: bytes over bandwidth) and computes two FLOPs per parameter for every token it carries,
plus the prompt's attention over itself (compute: FLOPs over peak). Memory and compute overlap
within a pass, so the pass takes the larger of the two (``StepModel.roofline``), plus the engine's
own work per iteration (scheduling, sampling: host time the roofline does not see). The roofs are
taken at ``BANDWIDTH_EFFICIENCY`` and ``COMPUTE_EFFICIENCY`` of the published peaks: what
AIConfigurator's measured kernel database for vLLM implies on two GPUs (A100 SXM, H100 SXM), held
within 13% (RMS; worst x1.23) on two it was not fitted to (H200, L40S) -- benchmarks/llm_roofline.py.
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
    prefix = ""
    if isinstance(config.get("text_config"), dict):  # a multimodal model's config: its language model's part
        config, prefix = config["text_config"], "text_config."
    return _shape(str(config.get("_name_or_path") or path.parent.name or path.stem), config, str(path), prefix)


MOST = 1e15  # larger than any real model's dimension or parameter count: a typo, not a model


def _shape(name: str, c: dict, source: str, prefix: str = "") -> ModelShape:
    """A decoder-only transformer's shape from its config.json fields: dense or a mixture of experts (Mixtral's
    ``num_local_experts``, Qwen's ``num_experts`` and ``moe_intermediate_size``, DeepSeek's ``n_routed_experts``,
    shared experts and first dense layers), grouped-query or multi-head latent attention (DeepSeek's MLA)."""
    def bad(key: str, value, expected: str) -> LoadprobeError:
        return LoadprobeError(f"--model {source}: field {prefix + key!r} must be {expected}, got {value!r}; fix the "
                              "config.json (a decoder-only transformer's, as Hugging Face publishes it)")

    def number(key: str, default=None, *, zero: bool = False) -> int:
        value = c.get(key, default)
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or value < (0 if zero else 1) or value > MOST or value != int(value)):
            raise bad(key, value, f"a whole number {'of 0 or more' if zero else 'above 0'}")
        return int(value)

    def given(key: str) -> bool:
        return c.get(key) is not None

    hidden, layers, heads = number("hidden_size"), number("num_hidden_layers"), number("num_attention_heads")
    kv_heads = number("num_key_value_heads", heads)
    if given("head_dim"):
        head = number("head_dim")
    elif hidden < heads:
        raise bad("hidden_size", hidden, f"at least num_attention_heads ({heads}) unless head_dim is given")
    else:
        head = hidden // heads
    vocab = number("vocab_size")
    tied = c.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise bad("tie_word_embeddings", tied, "true or false")
    if given("kv_lora_rank"):  # multi-head latent attention: a compressed key-value latent per token is cached
        rank, rope = number("kv_lora_rank"), number("qk_rope_head_dim")
        nope, value_dim = number("qk_nope_head_dim"), number("v_head_dim")
        q_rank = number("q_lora_rank") if given("q_lora_rank") else 0
        query = (hidden * q_rank + q_rank * heads * (nope + rope)) if q_rank else hidden * heads * (nope + rope)
        attention = query + hidden * (rank + rope) + rank * heads * (nope + value_dim) + heads * value_dim * hidden
        attention_width, kv_width = heads * (nope + rope), (rank + rope + 1) // 2  # one latent, not a key and a value
    else:
        attention = hidden * heads * head * 2 + hidden * kv_heads * head * 2  # Q and O, K and V
        attention_width, kv_width = heads * head, kv_heads * head
    dense_mlp = 3 * hidden * number("intermediate_size")  # a gated MLP: gate, up, down
    expert_keys = [k for k in ("num_local_experts", "num_experts", "n_routed_experts") if given(k)]
    experts = number(expert_keys[0]) if expert_keys else 1
    moe_layers = moe_all = moe_active = 0
    if experts > 1:
        routed = number("num_experts_per_tok")
        if routed > experts:
            raise bad("num_experts_per_tok", routed, f"at most {expert_keys[0]} ({experts})")
        expert = 3 * hidden * (number("moe_intermediate_size") if given("moe_intermediate_size")
                               else number("intermediate_size"))
        shared = (3 * hidden * number("shared_expert_intermediate_size") if given("shared_expert_intermediate_size")
                  else number("n_shared_experts", 0, zero=True) * expert)
        step = number("decoder_sparse_step", 1)
        dense_only = set(c.get("mlp_only_layers") or []) if isinstance(c.get("mlp_only_layers"), list) else set()
        moe_layers = sum(1 for i in range(number("first_k_dense_replace", 0, zero=True), layers)
                         if (i + 1) % step == 0 and i not in dense_only)
        moe_all = experts * expert + shared + hidden * experts  # every expert, the shared ones, the router
        moe_active = routed * expert + shared + hidden * experts
    embed = vocab * hidden * (1 if tied else 2)
    dense_layers = layers - moe_layers
    params = float(layers * attention + dense_layers * dense_mlp + embed + moe_layers * moe_all)
    active = params - moe_layers * (moe_all - moe_active)
    if given("num_parameters"):  # the model's own count, where its card gives one: the shape's count scaled to it
        stated = c["num_parameters"]
        if isinstance(stated, bool) or not isinstance(stated, (int, float)) or not 0 < stated <= MOST:
            raise bad("num_parameters", stated, "a number above 0")
        active, params = active * float(stated) / params, float(stated)
    return ModelShape(name=name, params=params, active_params=active, layers=layers, attention_width=attention_width,
                      kv_width=kv_width, source=source, hidden=hidden)


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
                      weights_ns=weights / read * 1e9, roofline=True, link_ns=link_ns,
                      link_per_token=link_per_token,
                      source=f"roofline of {tp} x {device.id} at {precision}, {COMPUTE_EFFICIENCY:.0%} of peak FLOP/s "
                             f"and {BANDWIDTH_EFFICIENCY:.0%} of peak bandwidth (within {ESTIMATE_ERROR:g}x either way)")
    slowest = steps.prefill_ns(longest)
    if not math.isfinite(slowest) or slowest > MOST_STEP_NS:
        raise LoadprobeError(f"{device.id}: by the catalog's figures one {longest:,}-token prompt would take "
                             f"{slowest / 1e9:,.3g} s on {tp} of them; check its figures (--catalog)")
    figures = {"flops_per_s": device.peak(precision) * tp, "bytes_per_s": bandwidth * tp, "memory_bytes": memory * tp,
               "weights_bytes": weights, "kv_bytes_per_token": kv, "compute_efficiency": COMPUTE_EFFICIENCY,
               "bandwidth_efficiency": BANDWIDTH_EFFICIENCY,
               "error_factor": ESTIMATE_ERROR, "engine_step_ms": step_ms,
               "interconnect_bytes_per_s": device.interconnect_bytes_per_s, "tensor_parallel_note": link_note}
    return Unit(device=device.id, tp=tp, precision=precision, kv_tokens=int(room // kv), steps=steps, figures=figures)


MOST_STEP_NS = 3.6e12
"""An hour for one prompt's pass: figures that give more are a typo, not a device (and beyond what a replay counts)."""
NVLINK_BYTES_PER_S = 100e9
"""Links at least this fast each way are a GPU-to-GPU fabric (NVLink and the like); slower ones a PCIe slot."""


def _all_reduces(shape: ModelShape, device, tp: int, precision: str) -> tuple[float, float, str]:
    """(ns per pass, ns per token, a note) of a ``tp``-device unit's all-reduces: two per layer (after attention,
    after the MLP), each of the pass's tokens' activations."""
    if tp == 1:
        return 0.0, 0.0, ""
    link = device.interconnect_bytes_per_s
    if not link:  # an unknown figure must not read as free: the unit cannot be estimated
        raise LoadprobeError(f"{device.id}: {shape.name} needs {tp} of them (tensor parallel), and the catalog gives "
                             "no link between them (interconnect_bytes_per_s) for its all-reduces; add the figure with "
                             "--catalog to plan on it")
    count = 2 * shape.layers
    per_token = count * 2 * (tp - 1) / tp * shape.width * PRECISION_BYTES[precision] / (link * LINK_EFFICIENCY) * 1e9
    note = (f"tensor-parallel over {tp}: {count} all-reduces per pass over {link / 1e9:,.3g} GB/s each way "
            f"(each {ALLREDUCE_LATENCY_US:g} us + the tokens' activations at {LINK_EFFICIENCY:.0%} of the link)")
    if tp > 2 and link < NVLINK_BYTES_PER_S:
        note += ("; over PCIe past two devices a server without peer-to-peer between its slots runs them through "
                 "the host, 4-8x slower (AIConfigurator's measured 4 and 8 L40S), so this unit may be much slower than "
                 "estimated")
    return count * ALLREDUCE_LATENCY_US * 1e3, per_token, note


def ridge_note(unit: Unit) -> str:
    """Where the unit's prefill turns from bandwidth- to compute-bound: the tokens per pass at which two FLOPs per
    parameter per token take as long as reading the weights."""
    s = unit.steps
    return f"compute-bound past ~{math.ceil(s.weights_ns / max(s.per_prompt_token, 1e-12)):,} tokens per pass"
