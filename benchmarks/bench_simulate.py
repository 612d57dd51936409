"""Simulator benchmark: ``loadprobe.simulate`` against an equivalent SimPy model of the same plan.

    python benchmarks/bench_simulate.py [--requests 1000000] [--simpy-requests N] [--repeat 1]
        [--seed 1] [--rate 360] [--simpy-timeout-s 900] [--json PATH] [--src SNAPSHOT_DIR]
        [--no-python-loop] [--no-compile-timing]

The plan, built in code (``plan()``): three stages, one engine each, every queue bounded, every
stage with a timeout tight enough that a few requests (~0.1%) do time out.

- ``decode`` on ``cpu`` (2 slots, queue 64, timeout 25 ms), lognormal p50 2 ms / p95 4 ms;
- ``backbone`` on ``npu0`` (1 slot, queue 16, timeout 30 ms), batched: size 8, max_wait_ms 5;
  a full batch takes lognormal p50 12 ms / p95 18 ms, a batch of b that times (0.2 + 0.8 b / 8)
  (a fixed part per launch and a part per item);
- ``head`` on ``gpu0`` (2 slots, queue 32, timeout 10 ms), lognormal p50 1.5 ms / p95 3 ms.

Arrivals: ``loadprobe.load.poisson`` at ``--rate`` (default 360/s), which keeps the bottleneck,
npu0, busy ~74% of the time (cpu ~40%, gpu0 ~30%); the script prints the utilisations loadprobe
measures.

Each stage draws its service times with ``loadprobe.simulator.lognormal`` from a ``random.Random``
stream per batch size (seeded from ``--seed``; ``StageTimes``), in every tool: if the models
start the executions of a stage in the same order, every execution gets the same service time in
all of them, so the latency percentiles and outcomes must agree -- a check that they do the same
work. The script says whether they are identical.

Each tool runs in a fresh interpreter, and its peak RSS is its own ``ru_maxrss``. The wall time
is of the simulation call alone, with its CPU time beside it (on a shared machine the CPU time
moves less than the wall time): arrivals and plan are built before the clock starts, and SimPy's
time includes building its model and the same percentile summary loadprobe computes.

- ``loadprobe``: ``loadprobe.simulate(plan, arrivals, samplers, seed=..., loop="compiled")``, the
  compiled event loop (numba). Its machine code is loaded from numba's disk cache before the
  clock starts (the time that takes is printed as "load"); before any run the script makes sure
  the cache is warm, and (unless ``--no-compile-timing``) times a first compile into an empty
  cache directory of its own, which is what the first run on a machine pays;
- ``loadprobe (Python loop)``: the same call with ``loop="python"`` (``--no-python-loop`` skips it);
- ``simpy``: the same plan written idiomatically in SimPy: a process per request going through
  the stages; an unbatched stage is a ``simpy.Resource`` with the engine's slots, requested with
  ``req | env.timeout(deadline)``; the batched stage is a ``simpy.Store`` fed by the requests and
  a batcher process that takes an engine slot (``simpy.Resource``), then collects up to ``size``
  members, waiting on ``store.get() | window timeout``, and starts the batch when it is full,
  when its oldest member has waited ``max_wait_ms`` or when the queue is full; each batch runs
  in its own process. A full queue rejects at once; a stage's deadline counts from reaching the
  stage (queueing included), and an execution still running at the last deadline of its batch is
  stopped then, as in loadprobe. No priorities are used, so a FIFO ``Resource`` is the
  equivalent of loadprobe's priority queue. The model covers what this plan uses (one stage per
  engine, no retries, fallback or breakers).

With ``--simpy-requests`` smaller than ``--requests``, SimPy runs on fewer requests (the first
ones of the same schedule) and loadprobe runs on that many too, so that the agreement is checked
on identical inputs; the speed ratio is then of requests per second, and the output says so.
``--src DIR`` measures the ``loadprobe`` package under DIR instead of this checkout's (a fixed
snapshot, while the working tree changes).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
if "--src" in sys.argv:  # a snapshot of the package to measure (e.g. `git archive HEAD loadprobe | tar -x`)
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--src") + 1]).resolve()))
elif str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

Z95 = 1.6448536269514722
# stage -> (engine, p50 ms, p95 ms); see plan()
SERVICE_MS = {"decode": (2.0, 4.0), "backbone": (12.0, 18.0), "head": (1.5, 3.0)}
FIXED_SHARE = 0.2  # of a full batch's time, paid by every batch whatever its size
EPS_S = 1e-9  # SimPy's window timer may land an ulp before the window's end


def plan():
    from loadprobe.pipeline.config import BatchConfig, EngineConfig, PipelineConfig, StageConfig

    return PipelineConfig(
        service="bench-simulate",
        engines={"cpu": EngineConfig(kind="cpu", max_concurrency=2, max_queue=64),
                 "npu0": EngineConfig(kind="npu", max_concurrency=1, max_queue=16),
                 "gpu0": EngineConfig(kind="gpu", max_concurrency=2, max_queue=32)},
        stages=[StageConfig(name="decode", engine="cpu", timeout_ms=25),
                StageConfig(name="backbone", engine="npu0", batch=BatchConfig(size=8, max_wait_ms=5),
                            timeout_ms=30),
                StageConfig(name="head", engine="gpu0", timeout_ms=10)])


class StageTimes:
    """One stage's service times, for both tools: a loadprobe lognormal drawn from a stream per batch size.

    The k-th execution of a batch of b at the stage gets the k-th draw of the stream seeded from
    (seed, stage, b), in loadprobe (whatever rng the simulator hands over) and in SimPy alike: the
    draw discipline of loadprobe's simulator, so both run the same executions. A batch of b takes
    ``FIXED_SHARE + (1 - FIXED_SHARE) * b / full`` of a full batch's time. ``draws`` gives the next
    ``n`` draws at once, as the compiled loop asks for them.
    """

    def __init__(self, p50_ms: float, p95_ms: float, seed: int, stage: int, full: int | None) -> None:
        from loadprobe.simulator import lognormal

        self.draw, self.seed, self.stage, self.full = lognormal(p50_ms, p95_ms), seed, stage, full
        self.streams: dict[int, random.Random] = {}

    def _stream(self, batch: int) -> random.Random:
        stream = self.streams.get(batch)
        if stream is None:
            stream = self.streams[batch] = random.Random((self.seed * 1000 + self.stage) * 100_000 + batch)
        return stream

    def _share(self, batch: int) -> float:
        return FIXED_SHARE + (1 - FIXED_SHARE) * batch / self.full

    def __call__(self, batch: int, _rng=None) -> float:
        value = self.draw(batch, self._stream(batch))
        return value * self._share(batch) if self.full else value

    def draws(self, batch: int, _rng, n: int):
        values = self.draw.draws(batch, self._stream(batch), n)
        return values * self._share(batch) if self.full else values


def samplers(config, seed: int) -> dict:
    """A ``StageTimes`` per stage (the simulator's own streams go unused, so SimPy can draw the same)."""
    return {s.name: StageTimes(*SERVICE_MS[s.name], seed, k, s.batch.size if s.batch else None)
            for k, s in enumerate(config.stages)}


def summary_ms(latencies_s) -> dict:
    """p50/p95/p99 the way loadprobe reports them (HdrHistogram, 3 significant digits), ms."""
    import numpy as np

    from loadprobe.analysis.histogram import Histogram

    if not len(latencies_s):
        return {"p50": None, "p95": None, "p99": None}
    hist = Histogram()
    hist.record(np.round(np.asarray(latencies_s) * 1e9).astype(np.int64))
    found = hist.percentiles((50, 95, 99))
    return {f"p{p}": found[p] / 1e6 for p in (50, 95, 99)}


# -- the SimPy model ---------------------------------------------------------------------------------------

QUEUED, RUNNING, OVER = 0, 1, 2


class Member:
    """A request waiting in (or running in) a batch."""

    __slots__ = ("enqueued", "deadline", "state", "done")

    def __init__(self, enqueued: float, deadline: float, done) -> None:
        self.enqueued, self.deadline, self.state, self.done = enqueued, deadline, QUEUED, done


def run_simpy(config, arrivals: list[float], draw: dict) -> dict:
    import simpy

    env = simpy.Environment()
    outcomes = {"ok": 0, "rejected": 0, "timeout": 0, "error": 0}  # the plan has no executor errors
    rejects: dict[str, int] = {}
    latencies: list[float] = []
    executions = {s.engine: 0 for s in config.stages}
    items = {s.engine: 0 for s in config.stages}

    def reject(reason: str) -> bool:
        outcomes["rejected"] += 1
        rejects[reason] = rejects.get(reason, 0) + 1
        return False

    def timed_out() -> bool:
        outcomes["timeout"] += 1
        return False

    class Unbatched:
        def __init__(self, stage) -> None:
            engine = config.engines[stage.engine]
            self.engine = stage.engine
            self.slots = simpy.Resource(env, capacity=min(stage.max_concurrency or engine.max_concurrency,
                                                          engine.max_concurrency))
            self.max_queue = engine.max_queue
            self.timeout_s = stage.timeout_ms / 1000
            self.draw = draw[stage.name]

        def run(self):
            slots = self.slots
            if slots.count >= slots.capacity and len(slots.queue) >= self.max_queue:
                return reject("queue_full")
            deadline = env.now + self.timeout_s
            with slots.request() as req:
                got = yield req | env.timeout(self.timeout_s)
                if req not in got:
                    return timed_out()  # leaving the with-block takes req out of the queue
                executions[self.engine] += 1
                items[self.engine] += 1
                service = self.draw(1, None)
                left = deadline - env.now
                if service > left:  # stopped at the deadline, its slot freed then
                    yield env.timeout(left)
                    return timed_out()
                yield env.timeout(service)
            return True

    class Batched:
        def __init__(self, stage) -> None:
            engine = config.engines[stage.engine]
            self.engine = stage.engine
            self.slots = simpy.Resource(env, capacity=min(stage.max_concurrency or engine.max_concurrency,
                                                          engine.max_concurrency))
            self.store = simpy.Store(env)
            self.waiting = 0  # members not yet in a started batch: the engine's queue
            self.max_queue = engine.max_queue
            self.size, self.max_wait_s = stage.batch.size, stage.batch.max_wait_ms / 1000
            self.timeout_s = stage.timeout_ms / 1000
            self.draw = draw[stage.name]
            env.process(self.batcher())

        def run(self):
            if self.waiting >= self.max_queue:
                return reject("queue_full")
            member = Member(env.now, env.now + self.timeout_s, env.event())
            self.waiting += 1
            self.store.put(member)  # an unbounded store takes it at once
            got = yield member.done | env.timeout(self.timeout_s)
            if member.done in got:
                return True
            if member.state == QUEUED:  # still waiting: leave the queue
                self.waiting -= 1
                if member in self.store.items:
                    self.store.items.remove(member)
            member.state = OVER
            return timed_out()

        def batcher(self):
            store, size = self.store, self.size
            while True:
                slot = self.slots.request()
                yield slot
                batch: list[Member] = []
                timer, timer_for = None, None
                while True:
                    while len(batch) < size and store.items:
                        batch.append((yield store.get()))
                    batch = [m for m in batch if m.state == QUEUED]
                    if not batch:
                        batch.append((yield store.get()))
                        continue
                    if len(batch) >= size:
                        break
                    if store.items:
                        continue
                    if self.waiting >= self.max_queue:
                        break  # the queue is full: start what there is
                    opens = batch[0].enqueued + self.max_wait_s
                    if env.now >= opens - EPS_S:
                        break  # the oldest has waited max_wait_ms
                    if timer_for != opens:
                        timer, timer_for = env.timeout(opens - env.now), opens
                    get = store.get()
                    yield get | timer
                    if get.triggered:
                        batch.append(get.value)
                    else:
                        get.cancel()
                for m in batch:
                    m.state = RUNNING
                self.waiting -= len(batch)
                env.process(self.execute(slot, batch))

        def execute(self, slot, batch: list[Member]):
            executions[self.engine] += 1
            items[self.engine] += len(batch)
            service = self.draw(len(batch), None)
            left = max(m.deadline for m in batch) - env.now
            if service > left:  # stopped at the batch's last deadline; every member has timed out by then
                yield env.timeout(left)
                self.slots.release(slot)
                return
            yield env.timeout(service)
            self.slots.release(slot)
            for m in batch:
                if m.state == RUNNING:
                    m.state = OVER
                    m.done.succeed()

    stages = [Batched(s) if s.batch else Unbatched(s) for s in config.stages]

    def request(arrived: float):
        for stage in stages:
            if not (yield from stage.run()):
                return
        outcomes["ok"] += 1
        latencies.append(env.now - arrived)

    def source():
        for t in arrivals:
            yield env.timeout(t - env.now)
            env.process(request(t))

    env.process(source())
    env.run()
    return {"outcomes": outcomes, "rejects": rejects, "latency_ms": summary_ms(latencies),
            "mean_batch": {e: items[e] / executions[e] if executions[e] else None for e in executions},
            "executions": executions}


# -- one tool, in this (fresh) interpreter ----------------------------------------------------------------

LOOP_OF = {"loadprobe": "compiled", "loadprobe-python": "python"}
LABEL = {"loadprobe": "**loadprobe.simulate**", "loadprobe-python": "loadprobe.simulate, Python loop"}


def child(tool: str, requests: int, seed: int, rate: float) -> dict:
    from loadprobe.load.schedules import poisson

    config = plan()
    arrivals = poisson(rate, requests=requests, seed=seed)
    assert len(arrivals) == requests
    draw = samplers(config, seed)
    load_s = None
    if tool in LOOP_OF:
        from loadprobe.simulator import simulate

        if tool == "loadprobe":  # the compiled loop's machine code, from numba's cache (warmed by the parent)
            started = time.perf_counter()
            import loadprobe.simulator.compiled  # noqa: F401
            load_s = time.perf_counter() - started
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if tool in LOOP_OF:
        start, cpu = time.perf_counter(), time.process_time()
        result = simulate(config, arrivals, draw, seed=seed, loop=LOOP_OF[tool])
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        out = {"outcomes": result.outcomes, "rejects": result.rejects,
               "latency_ms": {k: result.latency_ms[k] for k in ("p50", "p95", "p99")},
               "mean_batch": {n: e["mean_batch"] for n, e in result.engines.items()},
               "executions": {n: e["executions"] for n, e in result.engines.items()},
               "utilisation": {n: e["utilisation"] for n, e in result.engines.items()}}
    elif tool == "simpy":
        import simpy

        arrival_list = arrivals.tolist()
        start, cpu = time.perf_counter(), time.process_time()
        out = run_simpy(config, arrival_list, draw)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        out["version"] = simpy.__version__
    else:
        raise SystemExit(f"unknown tool {tool!r}")
    out.update(tool=tool, requests=requests, rate=rate, wall_s=wall, cpu_s=cpu, rss_before_mb=rss_before,
               peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, load_s=load_s)
    return out


def warm(args, cache_dir: str | None = None) -> float:
    """Run the compiled loop once on a few requests in a fresh interpreter (compiling it into numba's
    cache if it is not there yet, or into ``cache_dir``); the seconds that took."""
    import os

    code = (f"import sys; sys.path.insert(0, {str(args.src or REPO)!r}); sys.path.insert(1, {str(HERE.parent)!r})\n"
            "import bench_simulate as b\n"
            "from loadprobe.load import poisson\n"
            "from loadprobe.simulator import simulate\n"
            "config = b.plan()\n"
            "simulate(config, poisson(360, requests=2000, seed=1), b.samplers(config, 1), loop='compiled')\n")
    env = dict(os.environ, **({"NUMBA_CACHE_DIR": cache_dir} if cache_dir else {}))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env=env)
    return time.perf_counter() - started


def spawn(tool: str, requests: int, args) -> dict:
    cmd = [sys.executable, str(HERE), "--child", tool, "--requests", str(requests), "--seed", str(args.seed),
           "--rate", str(args.rate)] + (["--src", str(args.src)] if args.src else [])
    limit = args.simpy_timeout_s if tool == "simpy" else None
    print(f"  running {tool} on {requests:,} requests ...", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"tool": tool, "requests": requests, "error": f"did not finish within {limit} s"}
    if done.returncode != 0:
        return {"tool": tool, "requests": requests, "error": done.stderr.strip()[-2000:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"    {result['wall_s']:.2f} s ({result['cpu_s']:.2f} s CPU)", file=sys.stderr, flush=True)
    return result


def median_run(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    best = sorted(ok, key=lambda r: r["wall_s"])[len(ok) // 2]
    return {**best, "wall_runs": [r["wall_s"] for r in ok], "cpu_s": statistics.median(r["cpu_s"] for r in ok),
            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in ok),
            "load_s": statistics.median(r["load_s"] for r in ok) if ok[0].get("load_s") is not None else None}


def same_work(a: dict, b: dict) -> bool:
    """Whether two runs agree on everything both report: outcomes, rejects, percentiles, batches."""
    return all(a[key] == b[key] for key in ("outcomes", "rejects", "latency_ms", "mean_batch", "executions"))


# -- the parent: run, compare, print ----------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--simpy-requests", type=int, default=None,
                        help="requests for SimPy (default: --requests); fewer when SimPy would take too long")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each tool; the median is shown")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=360.0, help="Poisson arrivals per second")
    parser.add_argument("--simpy-timeout-s", type=float, default=900)
    parser.add_argument("--json", type=Path, default=None, help="also write every run here")
    parser.add_argument("--src", type=Path, default=None, help="directory holding the loadprobe package to measure")
    parser.add_argument("--no-python-loop", action="store_true", help="skip loadprobe's Python event loop")
    parser.add_argument("--no-compile-timing", action="store_true",
                        help="skip timing a first compile of the compiled loop into an empty cache")
    parser.add_argument("--child", choices=["loadprobe", "loadprobe-python", "simpy"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import loadprobe

        print(f"loadprobe from {Path(loadprobe.__file__).parent}", file=sys.stderr)
        print(json.dumps(child(args.child, args.requests, args.seed, args.rate)))
        return

    import tempfile

    print("  warming numba's cache of the compiled loop ...", file=sys.stderr, flush=True)
    warm_s = warm(args)
    first_compile_s = None
    if not args.no_compile_timing:
        with tempfile.TemporaryDirectory(prefix="loadprobe-numba-cache-") as empty:
            print("  timing a first compile (an empty cache of its own) ...", file=sys.stderr, flush=True)
            first_compile_s = warm(args, empty)
    n, m = args.requests, args.simpy_requests or args.requests
    ours = ["loadprobe"] + ([] if args.no_python_loop else ["loadprobe-python"])
    plan_runs = [(tool, n) for tool in ours] + ([(tool, m) for tool in ours] if m != n else []) + [("simpy", m)]
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.repeat):
        for tool, count in plan_runs:
            runs.setdefault((tool, count), []).append(spawn(tool, count, args))
    result = {key: median_run(value) for key, value in runs.items()}
    lp, sp = result[("loadprobe", n)], result[("simpy", m)]

    print(f"\nplan: decode cpu x2 | backbone npu0 x1, batch 8, max_wait 5 ms | head gpu0 x2; "
          f"Poisson {args.rate:g}/s; seed {args.seed}; "
          f"Python {platform.python_version()}, SimPy {sp.get('version', '?')}, {args.repeat} run(s) each\n")
    if "error" in sp:
        print(f"SimPy on {m:,} requests: {sp['error']}\n")
    sp_rps = m / sp["wall_s"] if "error" not in sp else None
    sp_cps = m / sp["cpu_s"] if "error" not in sp else None
    print("| tool | requests | wall s | CPU s | requests/s | peak RSS MB | vs SimPy (wall) | vs SimPy (CPU) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for tool, count in plan_runs:
        r = result[(tool, count)]
        if "error" in r:
            print(f"| {tool} | {count:,} | - | - | - | - | {r['error'][:60]} | |")
            continue
        rps = r["requests"] / r["wall_s"]
        ratio = f"{rps / sp_rps:.1f}x" if sp_rps else "-"
        ratio_cpu = f"{r['requests'] / r['cpu_s'] / sp_cps:.1f}x" if sp_cps else "-"
        name = LABEL.get(tool) or f"SimPy {r.get('version', '')}".strip()
        print(f"| {name} | {r['requests']:,} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {rps:,.0f} | "
              f"{r['peak_rss_mb']:.0f} | {ratio} | {ratio_cpu} |")
    if m != n:
        print(f"\nSimPy ran on the first {m:,} requests of the schedule, not {n:,}: the ratio columns compare "
              f"requests per second, and loadprobe's {m:,}-request rows are the same-input comparison.")
    load_s = lp.get("load_s")
    print(f"\ncompiled loop: loading its cached machine code took {load_s:.2f} s per process (before the clock)"
          if load_s is not None else "")
    print(f"warm-up run {warm_s:.1f} s; " + (f"a first compile (empty cache) {first_compile_s:.1f} s, in a run of "
                                            f"2,000 requests" if first_compile_s is not None else "first compile not timed"))
    if "error" in sp:
        return
    print(f"\nagreement on the same {m:,} requests (latency of completed requests, ms, HdrHistogram):\n")
    print("| | p50 | p95 | p99 | ok | rejected | timed out | npu0 mean batch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    same = [(LABEL[tool].strip("*"), result[(tool, m)]) for tool in ours] + [("SimPy", sp)]
    for label, r in same:
        if "error" in r:
            continue
        lat, o = r["latency_ms"], r["outcomes"]
        print(f"| {label} | {lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p99']:.2f} | {o['ok']:,} | "
              f"{o['rejected']:,} | {o['timeout']:,} | {r['mean_batch']['npu0']:.3f} |")
    ok = [r for _, r in same if "error" not in r]
    identical = all(same_work(ok[0], r) for r in ok[1:])
    print(f"\nidentical outcomes, rejects, percentiles, batches and executions across the {len(ok)} rows: "
          f"{'yes' if identical else 'NO'}")
    util = ", ".join(f"{e} {u:.1%}" for e, u in lp["utilisation"].items())
    print(f"loadprobe's engine utilisation ({n:,} requests): {util}")
    speed = (n / lp["wall_s"]) / sp_rps
    speed_cpu = (n / lp["cpu_s"]) / sp_cps
    print(f"loadprobe (compiled loop) {n:,} requests: {lp['wall_s']:.2f} s (target < 20 s); {speed:.1f}x SimPy's "
          f"requests/s (target >= 10x); by CPU time {speed_cpu:.1f}x")
    if load_s is not None:
        with_load = (n / (lp["wall_s"] + load_s)) / sp_rps
        print(f"counting the {load_s:.2f} s load of the compiled code as well: {with_load:.1f}x")
    walls = "; ".join(f"{tool} {', '.join(f'{w:.2f}' for w in result[(tool, n)]['wall_runs'])}"
                      for tool in ours if "error" not in result[(tool, n)])
    print(f"wall s is the median of {args.repeat} run(s): {walls}; SimPy {', '.join(f'{w:.2f}' for w in sp['wall_runs'])}")
    if args.json:
        args.json.write_text(json.dumps({"runs": {f"{t}:{c}": v for (t, c), v in runs.items()},
                                         "first_compile_s": first_compile_s, "warm_s": warm_s}, indent=1))


if __name__ == "__main__":
    main()
