"""How much later than vLLM itself a client sees each first token: ``loadprobe load --openai`` next to a
plain streaming client, on one vLLM server, in the same run.

    python benchmarks/llm_ttft_excess.py [--requests 24] [--concurrency 1,3] [--prompt-tokens 64]
                                         [--output-tokens 32] [--rounds 3] [--out DIR]
    python benchmarks/llm_ttft_excess.py --summarize DIR/results.json [...]

vLLM's own ``time_to_first_token`` starts when its engine took the request, so a client's TTFT is
vLLM's plus what lies before and after: the network (loopback here), vLLM's HTTP front end
(parsing, tokenizing, streaming the chunk back) and the client's own work. The plain client is
the least a client can add: Python's ``http.client``, one keep-alive connection per stream, its
clock read just before the request is written and as each SSE line arrives, no recording. Its
excess over vLLM's mean is the front end's share; loadprobe's excess should match it (loadprobe
counts from the intended send time, so its own send lateness is in its figure too).

Each round runs, at each ``--concurrency`` (closed loop: N streams back to back), the two clients
one after the other in alternating order, ``--requests`` streamed completions of ``--prompt-tokens``
in and ``--output-tokens`` out (ignore_eos). vLLM's means over each run come from its /metrics
(``benchmarks/llm_client.py: measured``; loadprobe's two calibration requests are left out of the
window). It prints a Markdown table and writes ``DIR/results.json``.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from time import perf_counter_ns
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.llm_client import CALIBRATION_REQUESTS, measured  # noqa: E402
from tests.support import vllm_cpu  # noqa: E402


STARVED_TPOT = 0.01
"""A run whose client TPOT is more than 1% off vLLM's own was starved: on 2 cores, vLLM's engine and
worker can keep its HTTP front end off the CPU for a whole run, and every chunk then arrives late and
bunched -- for any client. The summary gives the runs that were not, apart."""


def plain_client(url: str, concurrency: int, requests: int, prompt_tokens: int, output_tokens: int) -> list[dict]:
    """``requests`` streamed completions over ``concurrency`` connections: per request, its TTFT and TPOT (ms)."""
    parts = urlsplit(url)
    numbers, results, lock = itertools.count(), [], threading.Lock()

    def stream() -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        while (n := next(numbers)) < requests:
            body = json.dumps({"model": "tiny", "prompt": [100 + (n + k) % 200 for k in range(prompt_tokens)],
                               "max_tokens": output_tokens, "ignore_eos": True, "stream": True,
                               "stream_options": {"include_usage": True}})
            sent = perf_counter_ns()
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            first = last = tokens = None
            while line := response.readline():
                at = perf_counter_ns()
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                event = json.loads(line[6:])
                if event.get("choices") and "text" in event["choices"][0]:  # a token, even one that prints nothing
                    first, last = first or at, at
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
            with lock:
                results.append({"ttft_ms": (first - sent) / 1e6, "tpot_ms": (last - first) / (tokens - 1) / 1e6,
                                "tokens": tokens})
        conn.close()

    threads = [threading.Thread(target=stream) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def run_plain(args, url: str, concurrency: int, folder: Path, server_pid: int) -> dict:
    out = folder / "plain.json"
    command = [sys.executable, __file__, "--plain-client", url, "--concurrency", str(concurrency),
               "--requests", str(args.requests), "--prompt-tokens", str(args.prompt_tokens),
               "--output-tokens", str(args.output_tokens), "--out", str(out)]
    run = measured(command, url=url, server_pid=server_pid, log=folder / "plain.log")
    per_request = json.loads(out.read_text())
    run["client"] = {"requests": len(per_request), "tokens_out": sum(r["tokens"] for r in per_request),
                     "ttft_ms": statistics.fmean(r["ttft_ms"] for r in per_request),
                     "tpot_ms": statistics.fmean(r["tpot_ms"] for r in per_request)}
    return run


def run_loadprobe(args, url: str, concurrency: int, folder: Path, server_pid: int) -> dict:
    record = folder / "record"
    loadprobe = [sys.executable, "-m", "loadprobe"]
    command = [*loadprobe, "load", url, "--openai", "--model", "tiny", "--concurrency", str(concurrency),
               "--requests", str(args.requests), "--prompt-tokens", str(args.prompt_tokens),
               "--output-tokens", str(args.output_tokens), "--record", str(record), "--json"]
    # run outside the clone's root, where ``python -m loadprobe`` would find the source tree, not the install
    run = measured(command, url=url, server_pid=server_pid, log=folder / "load.json", preamble=CALIBRATION_REQUESTS,
                   cwd=folder)
    portrait = subprocess.run([*loadprobe, "analyze", str(record), "--json", "--no-html", "-o", str(folder / "report")],
                              capture_output=True, check=True, cwd=folder).stdout
    llm = json.loads(portrait)["llm"]
    run["client"] = {"requests": llm["requests"], "tokens_out": llm["tokens_out"]["total"],
                     "ttft_ms": llm["ttft_ms"]["mean"], "tpot_ms": llm["tpot_ms"]["mean"]}
    return run


def markdown(runs: list[dict]) -> str:
    lines = ["| streams | round | client | requests | client TTFT mean ms | vLLM TTFT mean ms | excess ms "
             "| client TPOT / vLLM's |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['concurrency']} | {r['round']} | {r['name']} | {r['client']['requests']} "
                     f"| {r['client']['ttft_ms']:.2f} | {r['server']['ttft_ms_mean']:.2f} | {r['excess_ms']:+.2f} "
                     f"| {r['tpot_ratio']:.4f} |")
    lines += ["", "| streams | client | median excess ms | range | median TPOT / vLLM's | unstarved runs "
              "| their median excess | their range |", "|---:|---|---:|---|---:|---:|---:|---|"]
    for concurrency in sorted({r["concurrency"] for r in runs}):
        for name in ("plain", "loadprobe"):
            mine = [r for r in runs if r["concurrency"] == concurrency and r["name"] == name]
            excess = [r["excess_ms"] for r in mine]
            clean = [r["excess_ms"] for r in mine if abs(r["tpot_ratio"] - 1) <= STARVED_TPOT]
            lines.append(f"| {concurrency} | {name} | {statistics.median(excess):+.2f} | {min(excess):+.2f} to "
                         f"{max(excess):+.2f} | {statistics.median(r['tpot_ratio'] for r in mine):.4f} "
                         f"| {len(clean)} of {len(mine)} | "
                         + (f"{statistics.median(clean):+.2f} | {min(clean):+.2f} to {max(clean):+.2f} |" if clean
                            else "- | - |"))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--concurrency", default="1,3", help="streams at once, comma-separated")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("llm-ttft-bench"))
    parser.add_argument("--plain-client", metavar="URL", help=argparse.SUPPRESS)  # the plain client's own process
    parser.add_argument("--summarize", nargs="+", type=Path, metavar="RESULTS",
                        help="print the table of earlier runs' results.json files, run nothing")
    args = parser.parse_args()
    if args.summarize:
        print(markdown([run for path in args.summarize for run in json.loads(path.read_text())["runs"]]))
        return
    if args.plain_client:
        results = plain_client(args.plain_client, int(args.concurrency), args.requests, args.prompt_tokens,
                               args.output_tokens)
        args.out.write_text(json.dumps(results))
        return
    vllm = vllm_cpu.python()
    if vllm is None:
        sys.exit(vllm_cpu.missing())
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    server = vllm_cpu.Server(vllm, vllm_cpu.make_model(vllm, out / "model"), workdir=out / "server")
    runs: list[dict] = []
    with server:
        for _ in range(4):  # a fresh engine's first requests are slow: neither client should pay for them
            server.complete("the quick brown fox", max_tokens=args.output_tokens)
        for rnd in range(1, args.rounds + 1):
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                for name in (("plain", "loadprobe") if rnd % 2 else ("loadprobe", "plain")):
                    folder = out / f"round{rnd}-c{concurrency}-{name}"
                    folder.mkdir(parents=True, exist_ok=True)
                    time.sleep(2)
                    print(f"round {rnd}, {concurrency} streams: {name} ...", file=sys.stderr, flush=True)
                    run = (run_plain if name == "plain" else run_loadprobe)(args, server.url, concurrency, folder,
                                                                            server.process.pid)
                    run |= {"round": rnd, "concurrency": concurrency, "name": name,
                            "excess_ms": run["client"]["ttft_ms"] - run["server"]["ttft_ms_mean"],
                            "tpot_ratio": run["client"]["tpot_ms"] / run["server"]["tpot_ms_mean"]}
                    runs.append(run)
                    (out / "results.json").write_text(json.dumps({"config": vars(args) | {"out": str(out)},
                                                                  "runs": runs}, indent=2, default=str))
    table = markdown(runs)
    (out / "summary.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
