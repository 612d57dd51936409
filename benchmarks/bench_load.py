"""Keeping an open-loop schedule: 2,000 requests/s for 10 s against a fast local server.

    python benchmarks/bench_load.py [--rate 2000] [--seconds 10] [--rounds 3]

A minimal asyncio HTTP/1.1 server runs in a subprocess on 127.0.0.1 (keep-alive, a 2-byte
body). Each contender sends a constant-rate schedule to it from a fresh interpreter, rounds
interleaved, and reports the same figures: achieved rate, send lateness (actual - intended
send time) and latency counted from the intended send time. Contenders:

- ``loadprobe load`` (the CLI: asyncio timers on an epoll loop woken to the microsecond);
- the same client on asyncio's stock event loop (``load.run(..., precise=False)``), whose
  timers wake up to 1 ms late because epoll's timeout is whole milliseconds: the naive peer;
- httpx ``AsyncClient``, open loop (``asyncio.sleep`` to each intended time, one task per
  request; the send time is httpx's request event hook, just before it writes). It falls
  behind at 2,000 req/s and its backlog makes a run take minutes, so it runs for
  ``--httpx-seconds`` (2) only;
- ``loadprobe load --record``: the cost of recording the client's view.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SERVER = textwrap.dedent('''
    import asyncio

    class Http(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport, self.buf = transport, b""

        def data_received(self, data):
            self.buf += data
            while (end := self.buf.find(b"\\r\\n\\r\\n")) >= 0:
                length = 0
                for line in self.buf[:end].split(b"\\r\\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(self.buf) < end + 4 + length:
                    return
                self.buf = self.buf[end + 4 + length:]
                self.transport.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")

    async def main():
        server = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())
''')

NAIVE = textwrap.dedent('''
    import json, sys
    from loadprobe import load
    url, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    report = load.run(url, load.constant(rate, duration=seconds), precise=False)
    print(json.dumps(report.to_dict()))
''')

HTTPX = textwrap.dedent('''
    import asyncio, json, sys
    from time import perf_counter_ns
    import httpx
    import numpy as np
    url, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    n = int(rate * seconds)
    sent, lateness, latency, errors = {}, [], [], 0

    async def on_request(request):
        sent[request.headers.get("x-request-id", "warm-up")] = perf_counter_ns()

    async def one(client, i, intended):
        global errors
        try:
            await client.get(url, headers={"x-request-id": str(i)})
        except httpx.HTTPError:
            errors += 1
            return
        lateness.append(sent[str(i)] - intended)
        latency.append(perf_counter_ns() - intended)

    async def main():
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        async with httpx.AsyncClient(limits=limits, timeout=10, event_hooks={"request": [on_request]}) as client:
            await client.get(url)  # one connection open before the clock starts, as loadprobe does
            sent.clear()
            start = perf_counter_ns() + 20_000_000
            tasks = []
            for i in range(n):
                intended = start + round(i * 1e9 / rate)
                wait = intended - perf_counter_ns()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
                tasks.append(asyncio.create_task(one(client, i, intended)))
            await asyncio.gather(*tasks)
        times = sorted(sent.values())
        ms = lambda values, p: float(np.percentile(values, p)) / 1e6
        print(json.dumps({
            "sent": len(sent), "scheduled": n, "achieved_rate": (len(times) - 1) * 1e9 / (times[-1] - times[0]),
            "lateness_ms": {"p50": ms(lateness, 50), "p99": ms(lateness, 99), "max": max(lateness) / 1e6},
            "latency_ms": {"p50": ms(latency, 50), "p99": ms(latency, 99), "max": max(latency) / 1e6},
            "errors": {"httpx": errors} if errors else {},
        }))

    asyncio.run(main())
''')


def contender(name: str, url: str, rate: float, seconds: float) -> list[str]:
    """The command line of one contender's run, in a fresh interpreter."""
    if name == "loadprobe load":
        return [sys.executable, "-m", "loadprobe", "load", url, "--rate", str(rate), "--duration", str(seconds), "--json"]
    if name == "loadprobe load --record":
        out = tempfile.mkdtemp(prefix="bench-load-")
        return [sys.executable, "-m", "loadprobe", "load", url, "--rate", str(rate), "--duration", str(seconds),
                "--record", out, "--json"]
    code = NAIVE if name.startswith("same client") else HTTPX
    return [sys.executable, "-c", code, url, str(rate), str(seconds)]


CONTENDERS = ["loadprobe load", "same client, stock asyncio loop", "httpx AsyncClient, open loop",
              "loadprobe load --record"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--httpx-seconds", type=float, default=2)
    parser.add_argument("--only", action="append", help="Run only these contenders (repeatable).")
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/"
        names = [n for n in CONTENDERS if not args.only or n in args.only]
        results: dict[str, list[dict]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names:
                seconds = args.httpx_seconds if name.startswith("httpx") else args.seconds
                load_before = Path("/proc/loadavg").read_text().split()[0]  # other work on the machine skews a round
                started = time.perf_counter()
                done = subprocess.run(contender(name, url, args.rate, seconds), capture_output=True, text=True,
                                      cwd=REPO, timeout=seconds * 60 + 60)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed: {done.stderr.strip()}")
                result = json.loads(done.stdout)
                results[name].append(result)
                late = result["lateness_ms"]
                print(f"round {round_ + 1} {name:38s} {seconds:g} s {result['achieved_rate']:8,.1f} req/s  lateness p50 "
                      f"{late['p50']:.3f} p99 {late['p99']:.3f} max {late['max']:.3f} ms  latency p99 "
                      f"{result['latency_ms']['p99']:.3f} ms  errors {result['errors'] or 0}  "
                      f"(load avg before {load_before}, {time.perf_counter() - started:.1f} s)", flush=True)
    finally:
        server.kill()
        server.wait()
    print(f"\nmedian of {args.rounds} rounds, {args.rate:,.0f} req/s for {args.seconds:g} s:")
    print("| contender | achieved req/s | lateness p50 ms | p99 ms | max ms | latency p50 ms | p99 ms | p99 lateness "
          "vs loadprobe |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = statistics.median(r["lateness_ms"]["p99"] for r in results[names[0]])
    for name in names:
        med = lambda get: statistics.median(get(r) for r in results[name])  # noqa: E731
        p99 = med(lambda r: r["lateness_ms"]["p99"])
        print(f"| {name} | {med(lambda r: r['achieved_rate']):,.1f} | {med(lambda r: r['lateness_ms']['p50']):.3f} | "
              f"{p99:.3f} | {med(lambda r: r['lateness_ms']['max']):.3f} | {med(lambda r: r['latency_ms']['p50']):.3f} | "
              f"{med(lambda r: r['latency_ms']['p99']):.3f} | {p99 / base:.1f}x |")


if __name__ == "__main__":
    main()
