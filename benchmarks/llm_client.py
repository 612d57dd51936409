"""LLM load generators side by side: ``loadprobe load --openai`` against NVIDIA AIPerf on one vLLM server.

    python benchmarks/llm_client.py [--requests 40] [--rate 2] [--prompt-tokens 64] [--output-tokens 64]
                                    [--rounds 2] [--out DIR] [--aiperf PATH] [--seed 1]
                                    [--max-other-cpu 1.0] [--retries 3] [--quiet-timeout 600]

vLLM's CPU build (``tests/support/vllm_cpu.py``: a tiny random-weight Llama served as "tiny") is
started once. Each round then runs the two clients back to back on the same workload (a constant
--rate, --requests streamed completions of --prompt-tokens in and --output-tokens out, ignore_eos),
in alternating order from round to round:

- AIPerf (``aiperf profile``, from its own virtual environment, default
  ``~/.cache/loadprobe/aiperf-0.13.0``: ``python3 -m venv DIR && DIR/bin/pip install aiperf==0.13.0``),
  completions endpoint, streaming, server token counts, the model's own folder as tokenizer, its
  server-metrics and GPU-telemetry collectors off (loadprobe does not scrape either), no warmup;
  its figures are read from ``profile_export_aiperf.json``. HF_HUB_OFFLINE is removed from its
  environment: with it set AIPerf 0.13.0 fails to load a tokenizer even from a local folder.
- ``loadprobe load URL --openai ... --record DIR``, then ``loadprobe analyze DIR --json --no-html``;
  its figures are the portrait's ``llm`` section.

For each client run it records:

- the client's CPU time: user + system of the subprocess and all its children (the getrusage
  RUSAGE_CHILDREN delta around it; AIPerf's services are child processes that it reaps, so they
  count), and for loadprobe the ``analyze`` step separately;
- the tokens the server generated for it (``vllm:generation_tokens_total`` delta), hence the
  client's CPU seconds per 1,000 streamed tokens;
- the client's own TTFT, TPOT (AIPerf calls it inter_token_latency: (latency - TTFT) / (tokens - 1)
  per request) and request latency: mean, p50, p90, p99;
- the server's own figures over the run, from /metrics deltas: requests, mean TTFT
  (``vllm:time_to_first_token_seconds``), mean TPOT (``vllm:request_time_per_output_token_seconds``)
  and mean end-to-end latency (``vllm:e2e_request_latency_seconds``), and the server processes'
  CPU time (/proc). ``loadprobe load --openai`` first sends two small non-streamed calibration
  requests (max_tokens 1); /metrics is polled every 20 ms from its start until both have finished and
  the run's window begins there; ``window_clean`` says whether that snapshot held exactly those two
  (otherwise the server figures include them, and ``server_whole`` always does);
- the machine's busy CPU over the run (/proc/stat) less the client's, the server's and this script's:
  "other CPU s", a check that nothing else was running (near zero when nothing else runs). Before each
  run it waits (up to --quiet-timeout) for 5 s in which the machine, less the server, is idle, and a
  run during which other processes took more than --max-other-cpu seconds is run again (--retries).

It prints a Markdown table and writes ``DIR/results.json`` (every figure and the exact commands) and
``DIR/summary.md``. The run takes about (rounds x 2 x (requests / rate + 15 s)) + 1 minute.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import vllm_cpu  # noqa: E402

AIPERF_VENV = Path.home() / ".cache" / "loadprobe" / "aiperf-0.13.0"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CALIBRATION_REQUESTS = 2  # loadprobe load --openai: two non-streamed max_tokens=1 requests before the run
STATS = ("mean", "p50", "p90", "p99")
SERVER_HISTOGRAMS = {"ttft_ms": "vllm:time_to_first_token_seconds",
                     "tpot_ms": "vllm:request_time_per_output_token_seconds",
                     "e2e_ms": "vllm:e2e_request_latency_seconds"}


# -- the server's side: /metrics, its processes' CPU, the machine's CPU -------------------------------

def scrape(url: str) -> dict[str, float]:
    """The server's vllm:* samples, summed over their labels (one engine, one model here); buckets left out."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:") or "_bucket{" in line:
            continue
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        value = rest.rsplit(" ", 1)[-1]
        try:
            values[name] = values.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return values


def server_figures(before: dict, after: dict) -> dict:
    """Requests, generated tokens and the mean TTFT, TPOT and end-to-end latency between two scrapes."""
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    out = {"requests": int(round(delta.get("vllm:e2e_request_latency_seconds_count", 0))),
           "generation_tokens": int(round(delta.get("vllm:generation_tokens_total", 0))),
           "prompt_tokens": int(round(delta.get("vllm:prompt_tokens_total", 0)))}
    for key, metric in SERVER_HISTOGRAMS.items():
        count = delta.get(metric + "_count", 0.0)
        out[key + "_mean"] = 1000 * delta.get(metric + "_sum", 0.0) / count if count else None
        out[key.removesuffix("_ms") + "_count"] = int(round(count))
    return out


def tree_cpu_s(root: int) -> float:
    """User + system seconds of process ``root`` and its live descendants, from /proc."""
    parents, times = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo += [child for child, parent in parents.items() if parent == pid]
    return total


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / CLK_TCK  # less idle and iowait; guest time is in user


def wait_quiet(server_pid: int, limit: float, *, cores: float = 0.15, window: float = 5.0) -> float | None:
    """Wait until the machine, less the server, has been under ``cores`` busy for ``window`` seconds.

    The seconds waited, or None when it was not quiet within ``limit`` seconds (the run goes ahead)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        busy, server = machine_busy_s(), tree_cpu_s(server_pid)
        time.sleep(window)
        if (machine_busy_s() - busy - (tree_cpu_s(server_pid) - server)) / window < cores:
            return time.monotonic() - started
    return None


def children_cpu_s(who=resource.RUSAGE_CHILDREN) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


# -- one client run ----------------------------------------------------------------------------------

def measured(command: list[str], *, url: str, server_pid: int, log: Path, env=None, cwd=None,
             preamble: int = 0, timeout: float = 1800) -> dict:
    """Run ``command`` to its end, measuring its CPU and the server's /metrics and CPU around it.

    With ``preamble`` > 0, /metrics is polled every 20 ms from the start until that many requests have
    finished: the run's window starts there (the client's own warm-up requests are left out)."""
    before = scrape(url)
    server_cpu, busy, own = tree_cpu_s(server_pid), machine_busy_s(), children_cpu_s(resource.RUSAGE_SELF)
    cpu, wall = children_cpu_s(), time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        start = before
        try:
            if preamble:
                base = before.get("vllm:e2e_request_latency_seconds_count", 0.0)
                while process.poll() is None:
                    sample = scrape(url)
                    if sample.get("vllm:e2e_request_latency_seconds_count", 0.0) - base >= preamble:
                        start = sample
                        break
                    time.sleep(0.02)
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise RuntimeError(f"{command[0]} ran past {timeout:.0f} s; see {log}") from None
        except BaseException:  # interrupted: the client goes too
            process.terminate()
            process.wait()
            raise
    wall, cpu = time.monotonic() - wall, children_cpu_s() - cpu
    busy, server_cpu = machine_busy_s() - busy, tree_cpu_s(server_pid) - server_cpu
    own = children_cpu_s(resource.RUSAGE_SELF) - own  # this script's /metrics polling
    after = scrape(url)
    if code != 0:
        raise RuntimeError(f"{' '.join(command[:3])} ... exited {code}: {log.read_text(errors='replace')[-2000:]}")
    preamble_seen = server_figures(before, start)
    return {"command": command, "exit_code": code, "wall_s": wall, "client_cpu_s": cpu,
            "server_cpu_s": server_cpu, "machine_busy_cpu_s": busy, "bench_cpu_s": own,
            "other_cpu_s": busy - cpu - server_cpu - own,
            "server": server_figures(start, after), "server_whole": server_figures(before, after),
            "preamble": preamble_seen,
            "window_clean": all(preamble_seen[k] == preamble for k in ("requests", "ttft_count", "tpot_count"))}


def stats(block: dict | None, keys=STATS, rename=None) -> dict:
    rename = rename or {}
    return {k: (block or {}).get(rename.get(k, k)) for k in keys}


def run_aiperf(args, url: str, model: Path, folder: Path, server_pid: int) -> dict:
    artifacts = folder / "artifacts"
    command = [str(args.aiperf), "profile", "--model", "tiny", "--url", url, "--endpoint-type", "completions",
               "--streaming", "--request-count", str(args.requests), "--request-rate", str(args.rate),
               "--arrival-pattern", "constant", "--isl", str(args.prompt_tokens), "--isl-stddev", "0",
               "--osl", str(args.output_tokens), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true",
               "--use-server-token-count", "--tokenizer", str(model), "--random-seed", str(args.seed),
               "--no-server-metrics", "--no-gpu-telemetry", "--ui", "none", "--artifact-dir", str(artifacts)]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    run = measured(command, url=url, server_pid=server_pid, log=folder / "aiperf.log", env=env, cwd=folder)
    export = json.loads((artifacts / "profile_export_aiperf.json").read_text())
    rename = {"mean": "avg"}
    run["client"] = {"requests": int(export["request_count"]["avg"]),
                     "tokens_out": int(export["output_sequence_length"]["sum"]),
                     "ttft_ms": stats(export["time_to_first_token"], rename=rename),
                     "tpot_ms": stats(export["inter_token_latency"], rename=rename),
                     "e2e_ms": stats(export["request_latency"], rename=rename),
                     "export": str(artifacts / "profile_export_aiperf.json")}
    return run


def run_loadprobe(args, url: str, folder: Path, server_pid: int) -> dict:
    record, report = folder / "record", folder / "report"
    command = [*args.loadprobe, "load", url, "--openai", "--model", "tiny", "--rate", str(args.rate),
               "--requests", str(args.requests), "--prompt-tokens", str(args.prompt_tokens),
               "--output-tokens", str(args.output_tokens), "--record", str(record), "--json"]
    run = measured(command, url=url, server_pid=server_pid, log=folder / "load.json", cwd=folder,
                   preamble=CALIBRATION_REQUESTS)
    analyze = [*args.loadprobe, "analyze", str(record), "--json", "--no-html", "-o", str(report)]
    cpu, wall = children_cpu_s(), time.monotonic()
    portrait = subprocess.run(analyze, capture_output=True, cwd=folder, check=True).stdout
    run["analyze"] = {"command": analyze, "cpu_s": children_cpu_s() - cpu, "wall_s": time.monotonic() - wall}
    llm = json.loads(portrait)["llm"]
    run["client"] = {"requests": llm["requests"], "tokens_out": llm["tokens_out"]["total"],
                     "ttft_ms": stats(llm["ttft_ms"]), "tpot_ms": stats(llm["tpot_ms"]),
                     "e2e_ms": stats(llm.get("e2e_ms")), "itl_ms": llm["itl_ms"],
                     "tokens_in_mean": llm["tokens_in"]["mean"], "portrait": str(report / "portrait.json")}
    return run


# -- the report ----------------------------------------------------------------------------------------

def fmt(value, digits=1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def cpu_per_1k(run: dict, with_analyze: bool = True) -> float:
    cpu = run["client_cpu_s"] + (run["analyze"]["cpu_s"] if with_analyze and "analyze" in run else 0.0)
    return 1000 * cpu / run["server_whole"]["generation_tokens"]


def markdown(runs: list[dict]) -> str:
    lines = ["Client-side latency (ms), as each client reports it:", "",
             "| round | client | requests | TTFT mean | p50 | p90 | p99 | TPOT mean | p50 | p90 | p99 "
             "| latency mean | p50 | p90 | p99 |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for run in runs:
        c = run["client"]
        cells = [fmt(c[m][s], 2 if m == "tpot_ms" else 1) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for s in STATS]
        lines.append(f"| {run['round']} | {run['name']} | {c['requests']} | " + " | ".join(cells) + " |")
    lines += ["", "The server's own figures over each run (vLLM /metrics deltas; ms) and CPU seconds:", "",
              "| round | client | server requests | TTFT mean | TPOT mean | e2e mean | window clean | tokens "
              "| client CPU s | (+ analyze) | CPU s / 1k tokens | server CPU s | other CPU s | wall s |",
              "|---|---|--:|--:|--:|--:|:-:|--:|--:|--:|--:|--:|--:|--:|"]
    for run in runs:
        s = run["server"]
        extra = fmt(run["analyze"]["cpu_s"], 2) if "analyze" in run else "-"
        other = fmt(run["other_cpu_s"], 2) + (" (!)" if run.get("disturbed") else "")
        lines.append(f"| {run['round']} | {run['name']} | {s['requests']} | {fmt(s['ttft_ms_mean'])} | "
                     f"{fmt(s['tpot_ms_mean'], 2)} | {fmt(s['e2e_ms_mean'])} | "
                     f"{'yes' if run['window_clean'] else 'no'} | {run['server_whole']['generation_tokens']:,} | "
                     f"{fmt(run['client_cpu_s'], 2)} | {extra} | {fmt(cpu_per_1k(run), 3)} | "
                     f"{fmt(run['server_cpu_s'], 2)} | {other} | "
                     f"{fmt(run['wall_s'])} |")
    return "\n".join(lines)


def summarize(runs: list[dict]) -> dict:
    out = {}
    for name in ("aiperf", "loadprobe"):
        mine = [r for r in runs if r["name"] == name]
        tokens = sum(r["server_whole"]["generation_tokens"] for r in mine)
        cpu = sum(r["client_cpu_s"] for r in mine)
        analyze = sum(r["analyze"]["cpu_s"] for r in mine if "analyze" in r)
        out[name] = {"runs": len(mine), "tokens": tokens, "client_cpu_s": cpu, "analyze_cpu_s": analyze,
                     "cpu_s_per_1k_tokens": 1000 * (cpu + analyze) / tokens,
                     "cpu_s_per_1k_tokens_run_only": 1000 * cpu / tokens,
                     "server_ttft_ms_mean": float(np.mean([r["server"]["ttft_ms_mean"] for r in mine])),
                     "server_tpot_ms_mean": float(np.mean([r["server"]["tpot_ms_mean"] for r in mine])),
                     "server_e2e_ms_mean": float(np.mean([r["server"]["e2e_ms_mean"] for r in mine])),
                     "server_cpu_s_mean": float(np.mean([r["server_cpu_s"] for r in mine]))}
    out["cpu_ratio_aiperf_to_loadprobe"] = (out["aiperf"]["cpu_s_per_1k_tokens"]
                                            / out["loadprobe"]["cpu_s_per_1k_tokens"])
    out["cpu_ratio_aiperf_to_loadprobe_run_only"] = (out["aiperf"]["cpu_s_per_1k_tokens_run_only"]
                                                     / out["loadprobe"]["cpu_s_per_1k_tokens_run_only"])
    return out


def version(python: Path, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rate", type=float, default=2.0, help="requests per second, constant")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="AIPerf's --random-seed")
    parser.add_argument("--pause", type=float, default=3.0, help="seconds of quiet between client runs")
    parser.add_argument("--quiet-timeout", type=float, default=600,
                        help="before each run, wait up to this many seconds for the machine to be idle "
                             "(apart from the server)")
    parser.add_argument("--max-other-cpu", type=float, default=1.0,
                        help="a run during which other processes used more CPU seconds than this is run again")
    parser.add_argument("--retries", type=int, default=3, help="at most this many reruns of a disturbed run")
    parser.add_argument("--out", type=Path, default=Path("llm-client-bench"))
    parser.add_argument("--aiperf", type=Path, default=AIPERF_VENV / "bin" / "aiperf")
    args = parser.parse_args()
    script = Path(sys.executable).parent / "loadprobe"
    args.loadprobe = [str(script)] if script.exists() else [sys.executable, "-m", "loadprobe"]
    vllm = vllm_cpu.python()
    if vllm is None:
        sys.exit(vllm_cpu.missing())
    if not args.aiperf.exists():
        sys.exit(f"AIPerf is not at {args.aiperf}: python3 -m venv {AIPERF_VENV} && "
                 f"{AIPERF_VENV}/bin/pip install aiperf==0.13.0 (or give --aiperf)")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model = vllm_cpu.make_model(vllm, out / "model")
    server = vllm_cpu.Server(vllm, model, workdir=out / "server")
    runs: list[dict] = []
    result = {"config": {k: v for k, v in vars(args).items() if k not in ("out",)} | {"out": str(out)},
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "cpu_model": next((line.split(":", 1)[1].strip() for line in
                                             Path("/proc/cpuinfo").read_text().splitlines()
                                             if line.startswith("model name")), None),
                          "python": platform.python_version()},
              "versions": {"vllm": version(vllm, "vllm-cpu") or vllm_cpu.VERSION,
                           "aiperf": version(args.aiperf.parent / "python", "aiperf"),
                           "loadprobe": version(Path(sys.executable), "loadprobe")},
              "server_command": server.command, "complete": False, "runs": runs}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that vLLM and a running client are stopped
    print(f"starting vLLM {vllm_cpu.VERSION} (CPU) ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    with server:
        print(f"vLLM up in {time.monotonic() - started:.0f} s at {server.url}", file=sys.stderr, flush=True)
        for _ in range(4):  # the first requests of a fresh engine are slow: neither client should pay for them
            server.complete("the quick brown fox", max_tokens=args.output_tokens)
        for rnd in range(1, args.rounds + 1):
            order = ("aiperf", "loadprobe") if rnd % 2 else ("loadprobe", "aiperf")
            for name in order:
                discarded = []
                for attempt in range(args.retries + 1):
                    time.sleep(args.pause)
                    waited = wait_quiet(server.process.pid, args.quiet_timeout)
                    folder = out / f"round{rnd}-{name}"
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir(parents=True)
                    print(f"round {rnd}: {name} ...", file=sys.stderr, flush=True)
                    run = (run_aiperf(args, server.url, model, folder, server.process.pid) if name == "aiperf"
                           else run_loadprobe(args, server.url, folder, server.process.pid))
                    if run["other_cpu_s"] <= args.max_other_cpu or attempt == args.retries:
                        break
                    print(f"  disturbed: {run['other_cpu_s']:.1f} CPU s of other processes; again",
                          file=sys.stderr, flush=True)
                    discarded.append({k: run[k] for k in ("other_cpu_s", "wall_s", "client_cpu_s", "server")})
                runs.append({"round": rnd, "name": name, "waited_for_quiet_s": waited,
                             "disturbed": run["other_cpu_s"] > args.max_other_cpu, "discarded": discarded, **run})
                (out / "results.json").write_text(json.dumps(result, indent=2, default=str))  # so far
    summary = summarize(runs)
    table = markdown(runs)
    a, lp = summary["aiperf"], summary["loadprobe"]
    table += (f"\n\nClient CPU seconds per 1,000 streamed tokens, all rounds: AIPerf {a['cpu_s_per_1k_tokens']:.3f}, "
              f"loadprobe {lp['cpu_s_per_1k_tokens']:.3f} with analyze ({lp['cpu_s_per_1k_tokens_run_only']:.3f} "
              f"load alone): AIPerf uses {summary['cpu_ratio_aiperf_to_loadprobe']:.1f}x "
              f"({summary['cpu_ratio_aiperf_to_loadprobe_run_only']:.1f}x against load alone).\n")
    result |= {"complete": True, "summary": summary}
    (out / "results.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "summary.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
