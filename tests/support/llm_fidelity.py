"""Fidelity of the LLM simulator at loads never recorded: the sample engine recorded at R, predicted at 1.5R and 2R.

For each rate the sample's continuous-batching engine (samples/llm) is served under a recorder in a
fresh process and streamed to by ``loadprobe load --openai`` (Poisson arrivals, mixed prompt and output
lengths, each rate its own seeds: independent draws), the client recording too. From the recording at
R alone, ``simulate_llm`` predicts the arrivals and lengths that were sent at 1.5R and 2R, which the
real engine then serves; both are read the same way (the client's view, as the portrait shows it).

Usage::

    runs = record_rates(tmp, rates=(4, 6, 8), seconds=40)
    rows = compare(runs, base=4)        # [{"rate": 6, "ttft_p50": (measured, predicted, error), ...}, ...]
    # benchmarks/llm_fidelity.py prints them; tests/simulator/test_llm_fidelity.py holds them to the limits
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLE_SETTINGS = dict(max_running=8, kv_tokens=4096, kv_reserve="request", chunked_prefill=False)
PROMPT, OUTPUT = "32:256", "16:128"  # tokens per request, drawn uniformly (the demo's)
LIMITS = {"p50": 0.10, "p95": 0.15}


def record_rates(folder: Path, rates, seconds: float, seed: int = 1) -> dict:
    """Serve and record the sample engine at each rate (a fresh server each); {rate: (paths, offsets, tokens)}."""
    from loadprobe import demo
    from loadprobe.load import openai
    from loadprobe.load.client import run
    from loadprobe.load.schedules import poisson

    runs = {}
    for k, rate in enumerate(rates):
        where = Path(folder) / f"rate-{rate:g}"
        where.mkdir(parents=True, exist_ok=True)
        data, client = where / "data", where / "client"
        port = demo._free_port()
        url = f"http://127.0.0.1:{port}"
        server = demo._start_server(data, port, log=where / "server.log", module="loadprobe.samples.llm.serve",
                                    service="llm")
        try:
            demo._wait_ready(server, url + "/health", timeout=90)
            offsets = poisson(rate, duration=seconds, seed=seed + 10 * k)
            prompts = openai.lengths("--prompt-tokens", PROMPT, len(offsets), seed=seed + 10 * k + 1)
            outputs = openai.lengths("--output-tokens", OUTPUT, len(offsets), seed=seed + 10 * k + 2)
            workload = openai.prepare(url, prompts, outputs, timeout=60)
            run(workload.url, offsets, openai=workload, timeout=300.0, record=str(client), mode="fidelity")
        finally:
            demo._stop_server(server)
        runs[rate] = ([str(data), str(client)], np.asarray(offsets), (np.asarray(prompts), np.asarray(outputs)))
    return runs


def compare(runs: dict, base: float) -> list[dict]:
    """Each other rate predicted from the recording at ``base``: measured, predicted and the relative error of
    TTFT and TPOT at p50 and p95."""
    from loadprobe.analysis.run import analyze
    from loadprobe.simulator.llm.engine import EngineSettings
    from loadprobe.simulator.llm.replay import simulate_llm

    paths = runs[base][0]
    rows = []
    for rate, (measured_paths, offsets, tokens) in sorted(runs.items()):
        if rate == base:
            continue
        measured = analyze(measured_paths, service="llm").llm
        sim = simulate_llm(paths, offsets=offsets, tokens=tokens, mode=f"poisson {rate:g}/s", seed=1,
                           settings=EngineSettings(**SAMPLE_SETTINGS, why="the sample engine's"), service="llm")
        row = {"rate": rate, "x": rate / base, "requests": (measured.requests, sim.llm.requests)}
        for name in ("ttft", "tpot"):
            for q in ("p50", "p95"):
                m = getattr(getattr(measured, f"{name}_ms"), q)
                p = getattr(getattr(sim.llm, f"{name}_ms"), q)
                row[f"{name}_{q}"] = (m, p, p / m - 1.0)
        rows.append(row)
    return rows


def misses(rows: list[dict]) -> list[str]:
    return [f"{row['x']:g}R {key}: measured {m:.3g} ms, predicted {p:.3g} ({e:+.1%})"
            for row in rows for key, value in row.items() if key.startswith(("ttft_", "tpot_"))
            for m, p, e in [value] if abs(e) > LIMITS[key.split("_")[1]]]
