"""What this machine is: CPU model and cores, memory, GPUs, OS and Python, for run.json."""

from __future__ import annotations

import os
import platform
import sys


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(gpus: list[dict]) -> dict:
    """The machine's inventory; ``gpus`` comes from the NVML sampler (empty without one)."""
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
        memory = psutil.virtual_memory().total
    except Exception:
        physical, memory = None, None
    return {
        "cpu": {
            "model": cpu_model(),
            "arch": platform.machine(),
            "logical_cores": os.cpu_count(),
            "physical_cores": physical,
        },
        "memory_bytes": memory,
        "gpus": gpus,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
    }
