"""An LLM plan (pipeline.yaml with ``llm:``) as vLLM engine arguments: one launch script per pool, and a README.

Each pool of the plan (``llm.pools``) becomes ``serve-<pool>.sh``: one ``vllm serve`` per replica
(``./serve-decode.sh 2`` starts replica 2 on its own devices and port), with the plan's scheduler
settings as vLLM's flags -- ``--max-num-seqs`` (running sequences), ``--max-num-batched-tokens``
(the token budget), chunked prefill on or off, ``--tensor-parallel-size``, ``--dtype``, and the KV
capacity as ``--num-gpu-blocks-override`` at 16 tokens a block. A disaggregated plan's prefill and
decode pools get a KV connector (``--kv-transfer-config``, NIXL) to hand each prompt's cache over.
What vLLM's flags cannot say -- how many replicas, which device type, the routing in front of them,
the targets -- is in the README, with the plan's own figures.

Usage::

    files = vllm_files(config)     # {"serve-engine.sh": text, "README.md": text}
"""

from __future__ import annotations

import json
import re
import shlex

from .._errors import LoadprobeError
from ..pipeline.config import PipelineConfig
from .losses import Loss, markdown, vllm_losses

BLOCK = 16  # tokens per KV block: vLLM's default block size on GPUs
BASE_PORT = 8000
DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
MEMORY_SHARE = 0.9  # the plan's KV cache is what the weights leave of this share (roofline.MEMORY_SHARE)


def vllm_files(config: PipelineConfig) -> dict[str, str]:
    """The launch script of each pool and the README."""
    if config.llm is None:
        raise LoadprobeError(f"{config.service}: this plan has no llm: section; export --to vllm is for the plans "
                             "loadprobe recommend --llm writes")
    files = {}
    for i, (name, pool) in enumerate(config.llm.pools.items()):
        files[f"serve-{name}.sh"] = _script(config, name, pool, BASE_PORT + 100 * i)
    files["README.md"] = _readme(config, vllm_losses(config))
    return files


def engine_args(config: PipelineConfig, name: str) -> list[str]:
    """The ``vllm serve`` flags of pool ``name``, from the plan."""
    pool = config.llm.pools[name]
    args = ["--tensor-parallel-size", str(pool.tensor_parallel), "--max-num-seqs", str(pool.max_running)]
    if pool.token_budget is not None:
        args += ["--max-num-batched-tokens", str(pool.token_budget)]
    if pool.chunked_prefill is not None:
        args.append("--enable-chunked-prefill" if pool.chunked_prefill else "--no-enable-chunked-prefill")
    if pool.precision in DTYPE:
        args += ["--dtype", DTYPE[pool.precision]]
    if config.engines[name].kind == "gpu":
        args += ["--gpu-memory-utilization", f"{MEMORY_SHARE:g}"]
        if pool.kv_tokens is not None:
            args += ["--block-size", str(BLOCK), "--num-gpu-blocks-override", str(max(1, pool.kv_tokens // BLOCK))]
    if pool.role in ("prefill", "decode"):
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                                                    separators=(",", ":"))]
    return args


def model_id(config: PipelineConfig) -> str:
    """What ``vllm serve`` is given as the model: a preset's Hugging Face id (from its source), else its name."""
    model = config.llm.model
    if model is None:
        return "YOUR_MODEL"
    found = re.search(r"huggingface\.co/([^/\s]+/[^/\s]+)", model.source or "")
    return found.group(1) if found else model.name


def _script(config: PipelineConfig, name: str, pool, port: int) -> str:
    engine = config.engines[name]
    model = model_id(config)
    devices = ""
    if engine.kind == "gpu":
        devices = ('first=$((REPLICA * TP))\n'
                   'export CUDA_VISIBLE_DEVICES=$(seq -s, "$first" $((first + TP - 1)))\n')
    lines, flags = [], engine_args(config, name)
    for arg in flags:  # a flag and its value on one line
        if arg.startswith("--"):
            lines.append(arg)
        else:
            lines[-1] += " " + shlex.quote(arg)
    args = " \\\n    ".join(lines)
    return (f"#!/usr/bin/env bash\n"
            f"# {name}: {pool.role} pool of {pool.replicas} vLLM replica(s) x {pool.tensor_parallel} "
            f"{engine.device or engine.kind} -- written by loadprobe export from the plan; README.md says what else "
            f"the plan needs.\n"
            f"# Usage: ./serve-{name}.sh [REPLICA]   (0 to {pool.replicas - 1}; MODEL=... to name your checkpoint)\n"
            f"set -euo pipefail\n"
            f"REPLICA=${{1:-0}}\nTP={pool.tensor_parallel}\n"
            f"MODEL=${{MODEL:-{shlex.quote(model)}}}\n"
            f"{devices}"
            f"exec vllm serve \"$MODEL\" --port $(({port} + REPLICA)) \\\n    {args}\n")


def _readme(config: PipelineConfig, losses: list[Loss]) -> str:
    llm = config.llm
    rows = ["| pool | role | replicas | devices each | max running | token budget | KV tokens | script |",
            "|---|---|---|---|---|---|---|---|"]
    for name, pool in llm.pools.items():
        engine = config.engines[name]
        rows.append(f"| {name} | {pool.role} | {pool.replicas} | {pool.tensor_parallel} x "
                    f"{engine.device or engine.kind} | {pool.max_running} | {pool.token_budget or '-'} | "
                    f"{pool.kv_tokens or '-'} | serve-{name}.sh |")
    model = model_id(config) if llm.model is not None else "the recorded engine's model"
    return "\n".join([
        f"# {config.service}: vLLM engines for the plan", "",
        f"Written by `loadprobe export --to vllm` from pipeline.yaml (`loadprobe recommend --llm`). Model: {model}; "
        "set `MODEL` to your checkpoint's path or Hugging Face id before starting a script.", "",
        *rows, "",
        "Each script starts one replica: `./serve-POOL.sh N` runs replica N on its own port"
        + (" and, for a GPU pool, its own GPUs (`CUDA_VISIBLE_DEVICES`)"
           if any(config.engines[n].kind == "gpu" for n in llm.pools) else "")
        + ". The flags are the plan's; regenerate with `loadprobe export` rather than edit them.", "",
        markdown(losses)])
