"""Fidelity of the LLM simulator at loads never recorded: the sample engine recorded at R, predicted at 1.5R and 2R.

For each rate the sample's continuous-batching engine (samples/llm) is served under a recorder in a
fresh process and streamed to by ``loadprobe load --openai`` (Poisson arrivals, mixed prompt and output
lengths, each rate its own seeds: independent draws), the client recording too. From the recording at
R alone, ``simulate_llm`` predicts the arrivals and lengths that were sent at 1.5R and 2R, which the
real engine then serves; both are read the same way (the client's view, as the portrait shows it).

The machine's own speed wanders between runs on a shared 2-core VM (the same rate and seed measured
minutes apart differs by up to 25% in TPOT), so a round is R, 1.5R and 2R back to back, several
rounds are run with their own seeds, and the figure held to the limits is each error's median over
the rounds; every round's errors are reported too. The simulator's own draws are the median of
``DRAWS`` seeds.

Usage::

    runs = record_rates(tmp, rates=(3, 4.5, 6), seconds=40)
    rows = compare(runs, base=3)        # [{"rate": 4.5, "ttft_p50": (measured, predicted, error), ...}, ...]
    # benchmarks/llm_fidelity.py prints them; tests/simulator/test_llm_fidelity.py holds them to limits
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLE_SETTINGS = dict(max_running=8, kv_tokens=4096, kv_reserve="request", chunked_prefill=False)
# vLLM CPU as tests/support/vllm_cpu.py serves it: V1 (chunked prefill), 64 MiB of KV cache = 65,536 tokens
VLLM_SETTINGS = dict(kv_tokens=65536, kv_reserve="paged", chunked_prefill=True)
PROMPT, OUTPUT = "32:256", "16:128"  # tokens per request, drawn uniformly (the demo's)
LIMITS = {"p50": 0.10, "p95": 0.15}
DRAWS = 5
METRICS = ("ttft_p50", "ttft_p95", "tpot_p50", "tpot_p95")


def record_rates(folder: Path, rates, seconds: float, seed: int = 1) -> dict:
    """Serve and record the sample engine at each rate (a fresh server each); {rate: (paths, offsets, tokens,
    steal)}: ``steal_while``'s figure for the rate's traffic."""
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
            steal = steal_while(lambda: run(workload.url, offsets, openai=workload, timeout=300.0, record=str(client),
                                            mode="fidelity"))
        finally:
            demo._stop_server(server)
        runs[rate] = ([str(data), str(client)], np.asarray(offsets), (np.asarray(prompts), np.asarray(outputs)), steal)
    return runs


def record_rates_vllm(folder: Path, rates, seconds: float, seed: int = 1) -> dict:
    """The same for vLLM's CPU build serving a tiny random-weight model (one server for every rate): the load
    client's recording only; {rate: (paths, offsets, tokens, steal)}."""
    from loadprobe.load import openai
    from loadprobe.load.client import run
    from loadprobe.load.schedules import poisson

    from . import vllm_cpu

    executable = vllm_cpu.python()
    if executable is None:
        raise RuntimeError(vllm_cpu.missing())
    folder = Path(folder)
    model = vllm_cpu.make_model(executable, folder / "tiny")
    runs = {}
    with vllm_cpu.Server(executable, model, workdir=folder) as server:
        for k, rate in enumerate(rates):
            client = folder / f"rate-{rate:g}" / "client"
            offsets = poisson(rate, duration=seconds, seed=seed + 10 * k)
            prompts = openai.lengths("--prompt-tokens", PROMPT, len(offsets), seed=seed + 10 * k + 1)
            outputs = openai.lengths("--output-tokens", OUTPUT, len(offsets), seed=seed + 10 * k + 2)
            workload = openai.prepare(server.url, prompts, outputs, timeout=60)
            steal = steal_while(lambda: run(workload.url, offsets, openai=workload, timeout=300.0, record=str(client),
                                            mode="fidelity"))
            runs[rate] = ([str(client)], np.asarray(offsets), (np.asarray(prompts), np.asarray(outputs)), steal)
    return runs


def compare(runs: dict, base: float, engine: str = "sample") -> list[dict]:
    """Each other rate predicted from the recording at ``base``: measured, predicted and the relative error of
    TTFT and TPOT at p50 and p95. ``engine``: "sample" or "vllm" (its settings, and the service to read)."""
    from loadprobe.analysis.run import analyze
    from loadprobe.simulator.llm.engine import EngineSettings
    from loadprobe.simulator.llm.replay import simulate_llm

    paths = runs[base][0]
    settings, service = (SAMPLE_SETTINGS, "llm") if engine == "sample" else (VLLM_SETTINGS, None)
    rows = []
    for rate, (measured_paths, offsets, tokens, steal) in sorted(runs.items()):
        if rate == base:
            continue
        measured = analyze(measured_paths, service=service).llm
        predicted = {key: [] for key in METRICS}
        for seed in range(DRAWS):
            sim = simulate_llm(paths, offsets=offsets, tokens=tokens, mode=f"poisson {rate:g}/s", seed=seed,
                               settings=EngineSettings(**settings, why=f"the {engine} engine's"), service=service)
            for key in METRICS:
                predicted[key].append(_figure(sim.llm, key))
        row = {"rate": rate, "x": rate / base, "requests": measured.requests}
        speeds = machine_speed(paths), machine_speed(measured_paths)
        row["machine"] = speeds[1] / speeds[0] if None not in speeds else None
        row["steal"] = (runs[base][3], steal)
        for key in METRICS:
            m, p = _figure(measured, key), float(np.median(predicted[key]))
            row[key] = (m, p, p / m - 1.0)
        rows.append(row)
    return rows


def steal_while(action) -> float | None:
    """Run ``action()``; the share of the host's CPU time the VM's hypervisor took meanwhile (%, as the recorder's
    ``cpu`` ``steal_pct`` reads it), None where the kernel counts none. The machine's pace moves with it."""
    import psutil

    from loadprobe.record.samplers import cpu_shares

    before = psutil.cpu_times()
    action()
    shares = cpu_shares(before, psutil.cpu_times())
    return shares[1] if shares is not None else None


def machine_speed(paths) -> float | None:
    """The machine's own pace during a recording: the median time of the engine's one-sequence decode passes
    (the same small computation each time), in ns; None where the engine did not time its passes."""
    from loadprobe.analysis.run import llm_recording

    requests = llm_recording(paths)[1]["service"]
    if requests is None or requests.passes is None:
        return None
    _, dur, batch = requests.passes
    return float(np.median(dur[batch == 1])) if (batch == 1).sum() >= 50 else None


def at_pace(rows: list[dict]) -> list[dict]:
    """The rows with each prediction moved by how much faster or slower the machine ran the engine's
    one-sequence pass during the measured run than during the recording it was predicted from (its time
    ratio): what the simulator would have predicted on the machine as it was then."""
    out = []
    for row in rows:
        pace = row.get("machine") or 1.0
        new = dict(row)
        for key in METRICS:
            m, p, _ = row[key]
            new[key] = (m, p * pace, p * pace / m - 1.0)
        out.append(new)
    return out


def _figure(llm, key: str) -> float:
    name, q = key.split("_")
    return getattr(getattr(llm, f"{name}_ms"), q)


def _most_steal(rows: list[dict]) -> tuple:
    """The most steal any round saw, at R and at the rate measured (None where none was counted)."""
    return tuple(max((v for v in values if v is not None), default=None)
                 for values in zip(*(row.get("steal", (None, None)) for row in rows)))


def medians(rounds: list[list[dict]]) -> list[dict]:
    """Each load's errors, median over the rounds (measured and predicted: medians too)."""
    out = []
    for i, first in enumerate(rounds[0]):
        paces = [r[i]["machine"] for r in rounds if r[i].get("machine")]
        row = {"rate": first["rate"], "x": first["x"], "requests": int(np.median([r[i]["requests"] for r in rounds])),
               "machine": float(np.median(paces)) if paces else None, "steal": _most_steal([r[i] for r in rounds])}
        for key in METRICS:
            values = np.array([r[i][key] for r in rounds])
            row[key] = (float(np.median(values[:, 0])), float(np.median(values[:, 1])), float(np.median(values[:, 2])))
        out.append(row)
    return out


def misses(rows: list[dict], scale: float = 1.0) -> list[str]:
    """What is past the limits (times ``scale``)."""
    return [f"{row['x']:g}R {key}: measured {m:.3g} ms, predicted {p:.3g} ({e:+.1%})"
            for row in rows for key in METRICS for m, p, e in [row[key]] if abs(e) > scale * LIMITS[key.split("_")[1]]]
