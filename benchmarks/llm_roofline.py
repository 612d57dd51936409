"""An LLM's step time on a device never run: loadprobe's roofline against AIConfigurator's measured kernel database.

    python benchmarks/llm_roofline.py [--aic PATH/TO/aiconfigurator] [--json]

AIConfigurator (NVIDIA, ``pip install aiconfigurator==0.12.0``, its own virtual environment) predicts
an engine's step times from kernels measured on each GPU for each serving framework. For Llama 3.1 8B
(and 70B, tensor-parallel over two) under vLLM on the four GPUs both know (A100 SXM, H100 SXM, H200,
L40S), this compares

- decode: AIConfigurator's TPOT of a static batch (``estimate --estimate-mode static_gen``, output 128
  tokens) against loadprobe's ``StepModel.decode_ns`` at that batch and the mean context, and
- prefill: its TTFT of one prompt (``static_ctx``) against loadprobe's pass of that prompt,

each as loadprobe / AIConfigurator on the kernels' time (loadprobe's step less the engine's own work per
iteration, ``ENGINE_STEP_MS``, which a static estimate does not hold). loadprobe's two efficiencies
(``roofline.BANDWIDTH_EFFICIENCY``, ``COMPUTE_EFFICIENCY``) were fitted to the A100 and H100 cells
(``FITTED``); the H200 and L40S cells are the check they were not fitted to. 70B over four L40S
(tensor parallel over PCIe) is reported apart. The all-reduce of a tensor-parallel unit
(``roofline.LINK_EFFICIENCY``, ``ALLREDUCE_LATENCY_US``) is also compared on its own against the
all-reduce times AIConfigurator measured (vLLM's custom all-reduce under CUDA graphs, messages of 4 KB
to 512 MB over 2, 4 and 8 GPUs): fitted on A100 and H100 (NVLink), checked on H200 (NVLink) and L40S
(PCIe). Run from outside the repository's root so that the installed loadprobe is imported.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from loadprobe.catalog import load_catalog
from loadprobe.simulator.llm.roofline import ALLREDUCE_LATENCY_US, LINK_EFFICIENCY, model_shape, on_device

AIC = Path.home() / ".cache" / "loadprobe" / "aiconfigurator-0.12.0" / "bin" / "aiconfigurator"
SYSTEMS = {"a100_sxm": "nvidia-a100-sxm-80gb", "h100_sxm": "nvidia-h100-sxm", "h200_sxm": "nvidia-h200",
           "l40s": "nvidia-l40s"}
MODELS = {"llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B"}
BATCHES = (1, 8, 32, 128)
DECODE_ISL = (512, 2048)
PREFILL_ISL = (512, 2048, 8192)
OSL = 128
FITTED = ("a100_sxm", "h100_sxm")  # the systems loadprobe's efficiencies were fitted to; the rest check them
APART = {("llama-3.1-70b", "l40s")}  # tensor parallel over four on PCIe: the all-reduce through the host


def all_reduce_rows(aic_path: Path, catalog) -> list[dict]:
    """loadprobe's all-reduce time against AIConfigurator's measured one, per system, GPU count and message."""
    import glob

    import pyarrow.parquet as pq

    data = glob.glob(str(aic_path.parent.parent / "lib" / "python*" / "site-packages" / "aiconfigurator_core"
                         / "systems" / "data"))
    rows = []
    for system, device_id in SYSTEMS.items():
        found = sorted(glob.glob(f"{data[0]}/{system}/comm/vllm/*/custom_allreduce_perf.parquet")) if data else []
        if not found:
            continue
        link = catalog.get(device_id).interconnect_bytes_per_s
        for r in pq.read_table(found[-1]).to_pylist():
            if r["backend"] != "vllm_graph" or r["message_size"] < 4096:
                continue
            n, size = r["num_gpus"], r["message_size"]
            mine = ALLREDUCE_LATENCY_US * 1e-3 + 2 * (n - 1) / n * size / (link * LINK_EFFICIENCY) * 1e3
            rows.append({"system": system, "gpus": n, "message_bytes": size, "aiconfigurator_ms": r["latency"],
                         "loadprobe_ms": round(mine, 5), "ratio": round(mine / r["latency"], 3)})
    return rows


def summarise(rows: list[dict]) -> dict:
    logs = [math.log(r["ratio"]) for r in rows]
    return {"cells": len(logs), "geomean_ratio": round(math.exp(sum(logs) / len(logs)), 3),
            "rms_log_error": round(math.sqrt(sum(x * x for x in logs) / len(logs)), 3),
            "min": round(math.exp(min(logs)), 3), "max": round(math.exp(max(logs)), 3)}


def aic(aic_path: Path, model: str, system: str, mode: str, batch: int, isl: int, osl: int, tp: int) -> float | None:
    """AIConfigurator's TPOT (static_gen) or TTFT (static_ctx), ms; None where it has no estimate."""
    done = subprocess.run([str(aic_path), "cli", "estimate", "--model-path", model, "--system", system, "--backend",
                           "vllm", "--estimate-mode", mode, "--batch-size", str(batch), "--isl", str(isl), "--osl",
                           str(osl), "--tp", str(tp), "--log-level", "ERROR"], capture_output=True, text=True,
                          timeout=600)
    field = "TPOT" if mode == "static_gen" else "TTFT"
    found = re.search(rf"^\s*{field}:\s+([0-9.]+) ms", done.stdout, re.M)
    return float(found.group(1)) if found else None


def ours(unit, mode: str, batch: int, isl: int) -> float:
    """loadprobe's kernel time of the cell, ms: the step less the engine's own work per iteration."""
    steps = unit.steps
    if mode == "static_gen":
        step = steps.decode_ns(batch, batch * (isl + OSL / 2))
    else:
        step = steps.step_ns(prefills=1, prompt_tokens=isl, prompt_sq=isl * isl)
    return (step - steps.iteration * steps.scale) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", type=Path, default=AIC, help="the aiconfigurator executable")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    catalog = load_catalog()
    rows = []
    started = time.perf_counter()
    for name, aic_model in MODELS.items():
        for system, device_id in SYSTEMS.items():
            try:  # the tensor-parallel group loadprobe would plan, which AIConfigurator is asked about too
                unit = on_device(model_shape(name), catalog.get(device_id), longest=max(PREFILL_ISL) + OSL)
            except Exception:  # the model does not fit eight of the device: nothing to compare
                continue
            tp = unit.tp
            cells = [("static_gen", b, isl) for b in BATCHES for isl in DECODE_ISL]
            cells += [("static_ctx", 1, isl) for isl in PREFILL_ISL]
            for mode, batch, isl in cells:
                theirs = aic(args.aic, aic_model, system, mode, batch, isl, OSL if mode == "static_gen" else 2, tp)
                if theirs is None:
                    continue
                mine = ours(unit, mode, batch, isl)
                rows.append({"model": name, "system": system, "device": device_id, "tp": tp,
                             "phase": "decode" if mode == "static_gen" else "prefill", "batch": batch, "isl": isl,
                             "aiconfigurator_ms": theirs, "loadprobe_ms": round(mine, 3),
                             "ratio": round(mine / theirs, 3)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # each as it comes: a long run's progress
    summary = {}
    groups = {"fitted (A100, H100)": lambda r: r["system"] in FITTED and (r["model"], r["system"]) not in APART,
              "held out (H200, L40S)": lambda r: r["system"] not in FITTED and (r["model"], r["system"]) not in APART,
              "70B over 4 x L40S (PCIe)": lambda r: (r["model"], r["system"]) in APART}
    for group, chosen in groups.items():
        for phase in ("decode", "prefill"):
            picked = [r for r in rows if r["phase"] == phase and chosen(r)]
            if picked:
                summary[f"{group} {phase}"] = summarise(picked)
    links = all_reduce_rows(args.aic, catalog)
    for system in SYSTEMS:
        for gpus in (2, 4, 8):
            picked = [r for r in links if r["system"] == system and r["gpus"] == gpus]
            if picked:
                fitted = "fitted" if system in FITTED else "held out"
                summary[f"all-reduce {system} x{gpus} ({fitted})"] = summarise(picked)
    document = {"rows": rows, "all_reduce": links, "summary": summary,
                "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(document, indent=2))
        return
    for r in rows:
        print(f"{r['model']:14} {r['system']:9} {r['phase']:7} batch {r['batch']:4} isl {r['isl']:5}  "
              f"AIC {r['aiconfigurator_ms']:9.3f} ms  loadprobe {r['loadprobe_ms']:9.3f} ms  x{r['ratio']:.2f}")
    for group, s in summary.items():
        print(f"{group}: loadprobe / AIConfigurator geometric mean x{s['geomean_ratio']}, RMS log error "
              f"{s['rms_log_error']} over {s['cells']} cells (x{s['min']} to x{s['max']})")


if __name__ == "__main__":
    main()
