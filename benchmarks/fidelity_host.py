"""Does a plan's host capacity match the service it was recorded from? A real FastAPI service, measured twice.

    python benchmarks/fidelity_host.py [--rate 150] [--seconds 20] [--workers 1] [--concurrency 16]
                                       [--rows 64] [--steps matrix|small] [--endpoint sync|async]
                                       [--keep DIR] [--json]

The service (written to a temporary folder, served by uvicorn on 127.0.0.1): two ``@probe`` numpy steps per
request and, outside them, the framework's own work -- request parsing, a pydantic model, a JSON response of
a few hundred numbers -- so that a good share of each request's time is in no probed stage. ``--steps
matrix`` (default): the steps are BLAS matrix work on ``--rows`` rows (the interpreter lock released while
it runs, BLAS threads beside it); ``--steps small``: ``--rows`` small numpy calls on a 64-vector each (the
issue's own service: ``tanh`` holds the lock, each ``sort`` lets go of it for a microsecond). ``--endpoint
sync`` runs the handler in FastAPI's thread pool, ``async`` on the event loop. It is recorded under
``loadprobe record`` while ``loadprobe load`` sends an open-loop Poisson load well under saturation;
``loadprobe analyze`` and ``loadprobe recommend --engines cpu`` then estimate what the host carries (the
all-CPU plan's capacity). Then the same service, recorded the same way, is saturated by a closed loop
(``loadprobe load --concurrency``) and its throughput measured; that recording, made at saturation, is
planned too (its plan should carry what it carried). Prints the estimates, the throughput and their ratios;
exit 1 when the estimate is off by more than 25%. The load client runs on the same host, as a user's would.
Each phase's CPU steal (the recordings' ``cpu`` ``steal_pct``) is printed too: where a virtual machine's
hypervisor took 5% or more of the CPU in either phase, the two ran on different machines in effect, and the
run says so and exits 3 instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from loadprobe.portrait import STEAL_WARN_PCT

SERVICE = '''
import asyncio
import os
import time

import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel

from loadprobe import probe
from loadprobe.instrumentation.asgi import instrument_app

app = instrument_app(FastAPI())
ROWS = int(os.environ.get("BENCH_ROWS", "64"))
SMALL = os.environ.get("BENCH_STEPS") == "small"
WEIGHTS = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
SQUARE = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)


class Query(BaseModel):
    values: list[float]
    tag: str = "x"


@probe("embed", engine="cpu")
def embed(values):
    if SMALL:
        x = np.asarray(values, dtype=np.float32)
        for _ in range(ROWS):
            x = np.tanh(x * 0.5 + 0.1)
        return x
    x = np.tile(np.asarray(values, dtype=np.float32), (ROWS, 1))
    return np.tanh(x @ WEIGHTS @ SQUARE)


@probe("score", engine="cpu")
def score(x):
    if SMALL:
        for _ in range(ROWS // 2):
            x = np.sort(x)[::-1] * 0.99
        return x[:64]
    return np.sort(x.ravel())[::-1][:64]


AWAIT_S = float(os.environ.get("BENCH_AWAIT_MS", "0")) / 1000.0


@probe("remote_model")
async def remote_model(top):  # a downstream call: awaited, no core held
    await asyncio.sleep(AWAIT_S)
    return top


@probe("remote_model_blocking")
def remote_model_blocking(top):  # the same call, blocking its thread
    time.sleep(AWAIT_S)
    return top


@app.get("/health")
def health():
    return {"ok": True}


def answer(top, query: Query):
    return {"tag": query.tag, "top": [round(float(v), 4) for v in top[:16]]}


if os.environ.get("BENCH_ENDPOINT") == "async":
    @app.post("/score")
    async def handle(query: Query):  # on the event loop's thread: no thread pool
        top = score(embed(query.values))
        if AWAIT_S:
            top = await remote_model(top)
        return answer(top, query)
else:
    @app.post("/score")
    def handle(query: Query):  # FastAPI runs it in its thread pool
        top = score(embed(query.values))
        if AWAIT_S:
            top = remote_model_blocking(top)
        return answer(top, query)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(folder: Path, data: Path, port: int, workers: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "loadprobe", "record", "-o", str(data), "--", sys.executable, "-m", "uvicorn",
               "svc:app", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--log-level",
               "warning"]
    proc = subprocess.Popen(command, cwd=folder, start_new_session=True)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the service did not start")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def load(url: str, body: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "loadprobe", "load", url, "--method", "POST", "--body-file", str(body),
                          "--header", "content-type: application/json", "--max-failed", "1", "--json", *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=150.0, help="open-loop rate while recording, req/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each load, s")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--concurrency", type=int, default=16, help="closed-loop workers")
    parser.add_argument("--rows", type=int, default=64, help="rows of the probed matrix work (more: less time outside)")
    parser.add_argument("--steps", choices=("matrix", "small"), default="matrix",
                        help="matrix: BLAS work on --rows rows; small: many small numpy calls holding the interpreter")
    parser.add_argument("--endpoint", choices=("sync", "async"), default="sync",
                        help="sync: a def endpoint (FastAPI's thread pool); async: an async def one (the event loop)")
    parser.add_argument("--await-ms", type=float, default=0.0,
                        help="a third stage per request waiting this long on a downstream call (awaited on the "
                             "event loop with --endpoint async, blocking its thread with sync)")
    parser.add_argument("--keep", type=Path, help="copy both recordings (recorded/, saturated/) into this new folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import loadprobe
    from loadprobe.plan.constraints import Constraints
    from loadprobe.plan.planner import recommend

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "svc.py").write_text(SERVICE, encoding="utf-8")
        body = folder / "query.json"
        body.write_text(json.dumps({"values": [float(i % 7) for i in range(64)], "tag": "bench"}), encoding="utf-8")
        os.environ["BENCH_ROWS"] = str(args.rows)
        os.environ["BENCH_STEPS"] = args.steps
        os.environ["BENCH_ENDPOINT"] = args.endpoint
        os.environ["BENCH_AWAIT_MS"] = str(args.await_ms)
        port = free_port()
        url = f"http://127.0.0.1:{port}/score"
        proc = serve(folder, folder / "recorded", port, args.workers)
        try:
            open_loop = load(url, body, "--poisson", "--rate", str(args.rate), "--duration", str(args.seconds))
        finally:
            stop(proc)
        portrait = loadprobe.analyze([str(folder / "recorded")])
        plan = recommend(portrait, Constraints.parse(engines="cpu"), rate_why="bench")
        estimate = plan.recommended.estimate.max_rps
        proc = serve(folder, folder / "saturated", port, args.workers)
        try:
            closed = load(url, body, "--concurrency", str(args.concurrency), "--duration", str(args.seconds))
        finally:
            stop(proc)
        # The closed loop's own recording, saturated: its plan should carry what it carried.
        closed_portrait = loadprobe.analyze([str(folder / "saturated")])
        saturated = recommend(closed_portrait, Constraints.parse(engines="cpu"), rate_why="bench").recommended
        if args.keep:
            shutil.copytree(folder, args.keep, ignore=shutil.ignore_patterns("__pycache__"))
    measured = closed["succeeded"] / closed["elapsed_s"]
    steal = {"recorded": _steal_pct(portrait), "closed_loop": _steal_pct(closed_portrait)}
    void = any(v is not None and v >= STEAL_WARN_PCT for v in steal.values())
    result = {"workers": args.workers, "steps": args.steps, "endpoint": args.endpoint, "rows": args.rows,
              "recorded_rate_rps": args.rate,
              "recorded_p50_ms": open_loop.get("latency_ms", {}).get("p50"),
              "unattributed_share": portrait.requests.unattributed_share,
              "host_work": plan.recommended.host[1].how if plan.recommended.host else None,
              "interpreter": next((n for n in plan.recommended.notes if "interpreter" in n), None),
              "native_pools": next((n for n in plan.recommended.notes if n.startswith("CPU threads:")), None),
              "bottleneck": plan.recommended.estimate.bottleneck,
              "estimated_capacity_rps": estimate, "closed_loop_rps": measured, "ratio": estimate / measured,
              "steal_pct": steal, "void": void,
              "saturated_recording": {"estimated_capacity_rps": saturated.estimate.max_rps,
                                      "bottleneck": saturated.estimate.bottleneck,
                                      "ratio": saturated.estimate.max_rps / measured,
                                      "contention": next((n for n in saturated.notes if n.startswith("CPU times:")),
                                                         None)}}
    print(json.dumps(result, indent=2) if args.json else
          f"uvicorn x{args.workers}, {args.steps} steps: recorded at {args.rate:g} req/s "
          f"({portrait.requests.unattributed_share:.0%} of "
          f"request time in no probed stage); estimated host capacity {estimate:.0f} req/s; closed loop "
          f"(concurrency {args.concurrency}) {measured:.0f} req/s; ratio {estimate / measured:.2f}; "
          f"from the closed loop's own recording {saturated.estimate.max_rps:.0f} req/s "
          f"(ratio {saturated.estimate.max_rps / measured:.2f}); CPU steal {_shown(steal['recorded'])} recording, "
          f"{_shown(steal['closed_loop'])} closed loop"
          + (f"; void: the hypervisor took {STEAL_WARN_PCT:g}% or more of the CPU in a phase, so they ran on different "
             "machines in effect" if void else ""))
    return 3 if void else 0 if abs(estimate / measured - 1) <= 0.25 else 1


def _steal_pct(portrait) -> float | None:
    """The recording's mean CPU steal while serving (%), None where the kernel counts none."""
    return next((m.mean for m in portrait.devices.metrics if m.device == "cpu" and m.metric == "steal_pct"), None)


def _shown(pct: float | None) -> str:
    return "unknown" if pct is None else f"{pct:.1f}%"


if __name__ == "__main__":
    sys.exit(main())
