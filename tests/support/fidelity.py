"""The fidelity check of ``loadprobe simulate``: the real Router over HTTP against the simulator, same inputs.

Shared by tests/simulator/test_simulate_fidelity.py (10 s of traffic per pattern) and
benchmarks/fidelity_simulate.py (the full check and its options; docs/simulate.md#fidelity).
For one arrival pattern, ``compare`` (or ``run_pattern``, which measures a miss again when the
machine was too busy to keep time)

1. starts a server in a subprocess (``tests/support/fidelity_server.py``): a minimal HTTP/1.1
   server on 127.0.0.1 whose handler awaits ``loadprobe.route.Router.submit`` on the plan of
   ``plan_text()`` (five stages on engines cpu, npu0 and gpu0: bounded queues, timeouts, a
   batched stage with ``max_wait_ms``, a fallback capped by ``max_ratio``, a retry budget).
   Every executor is an ``async def`` that awaits ``asyncio.sleep(t)``, ``t`` drawn from
   ``loadprobe.simulator.from_recording`` on samples/data/vision, times ``scale``;
2. sends the arrivals with ``loadprobe.load.run`` (the ``loadprobe load`` client, open loop),
   recording the client's view; the server notes for every request when ``submit`` was called,
   how long it took to return (the router's end-to-end latency) and how it ended;
3. runs ``loadprobe.simulate`` with the same plan and samplers on the arrival times the router saw;
4. compares -- p50 and p95 end to end (relative error, limit 10%), the share of requests
   rejected and each fallback stage's failover share (difference, limit 2 percentage points).

``scale``: the recorded times (the backbone scaled to the NPU's roofline by ``from_recording``)
run from 0.03 to 27 ms, and on a busy 2-core machine a sleep on an event loop wakes tens to
hundreds of microseconds late. Every service time is multiplied by ``scale`` (10) in the
router's executors and in the simulator alike, and the plan's timeouts and batch window with
them, so the comparison is about queueing rather than timer jitter.

``draws``: ``paired`` (default) gives each (stage, engine, batch size) its own random stream
seeded from ``seed``; the router's executor and the simulator draw from it in the order the
executions of that size start (the simulator's own draw discipline, which its compiled loop
relies on), so both see the same sequence of recorded times on every lane (common random
numbers: the comparison measures the model, not the luck of two samples). ``independent`` lets
the simulator draw its own, as a user would: 21 simulations with seeds of their own, their
medians compared and their range shown; the error then includes the sampling noise of a finite run.

Usage::

    from tests.support import fidelity

    offsets = fidelity.patterns(10.0, scale=10, seed=1)["poisson"]
    result = fidelity.run_pattern("poisson", offsets, scale=10, seed=1)
    print(fidelity.render(result)); result.ok
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "samples" / "data" / "vision"
TRACE = REPO / "samples" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"

P_LIMIT = 0.10  # relative error of p50 and p95
SHARE_LIMIT = 0.02  # absolute difference of the reject and failover shares
# A run whose executors overslept by more than these shares of the mean service time (mean, p99)
# is "starved": the machine was busy with other work. A miss on a starved run is measured again.
STARVED_MEAN, STARVED_P99 = 0.02, 0.20
INDEPENDENT_RUNS = 21  # draws="independent": simulations, each with its own draws; their medians are compared


def plan_text(scale: float = 10.0) -> str:
    """The plan: samples/data/vision's stages; timeouts and batch window in proportion to ``scale``.

    At scale 10 the CPU (decode + preprocess, ~57 ms a request, 4 slots) carries ~70 req/s. When
    more than 8 requests wait for it, decodes move to the GPU's decoder, for at most 20% of them;
    past that cap they wait for the CPU after all (``otherwise: queue``) unless its queue of 24 is
    full. From the recording the simulator puts the backbone at ~0.3-1.2 ms on the NPU (its
    roofline estimate), so the NPU mostly waits out its 10 ms batch window.
    """
    def ms(at_scale_10: float) -> str:
        return f"{at_scale_10 * scale / 10:g}"

    return f"""\
version: 1
service: vision-fidelity
engines:
  cpu: {{kind: cpu, max_concurrency: 4, max_queue: 24}}
  npu0: {{kind: npu, device: ascend-310p, max_concurrency: 1, max_queue: 16}}
  gpu0: {{kind: gpu, device: nvidia-l4, max_concurrency: 2, max_queue: 16}}
stages:
  - name: decode
    engine: cpu
    timeout_ms: {ms(300)}
    fallback: {{engine: gpu0, when: {{queue_len_over: 8}}, max_ratio: 0.2, otherwise: queue}}
  - {{name: preprocess, engine: cpu, timeout_ms: {ms(300)}}}
  - name: backbone
    engine: npu0
    batch: {{size: 4, max_wait_ms: {ms(10)}}}
    timeout_ms: {ms(150)}
  - {{name: head, engine: gpu0, timeout_ms: {ms(150)}}}
  - {{name: nms, engine: gpu0, timeout_ms: {ms(150)}}}
routing:
  retry: {{budget_ratio: 0.1, max_attempts: 2}}
"""


# -- service times -------------------------------------------------------------------------------


class Scaled:
    """A sampler ``(batch, rng) -> seconds``, every draw times ``factor``."""

    def __init__(self, sampler, factor: float) -> None:
        self.sampler, self.factor = sampler, factor

    def __call__(self, batch: int, rng: random.Random) -> float:
        return self.factor * self.sampler(batch, rng)


class OwnStream:
    """A sampler drawing from its own random streams, one per batch size, whatever rng it is handed
    (paired draws): the k-th execution of a batch of b gets the k-th draw of the lane's stream for b."""

    def __init__(self, sampler, seed: int, stage: str, engine: str) -> None:
        self.sampler, self.seed, self.stage, self.engine = sampler, seed, stage, engine
        self.streams: dict[int, random.Random] = {}

    def __call__(self, batch: int, rng: random.Random | None = None) -> float:
        stream = self.streams.get(batch)
        if stream is None:
            stream = self.streams[batch] = lane_rng(self.seed, self.stage, self.engine, batch)
        return self.sampler(batch, stream)


class Replayed:
    """The durations one lane's executions of each batch size really took in the router, in order; then ``rest``."""

    def __init__(self, durations: dict[int, list[float]], rest) -> None:
        self.durations, self.rest, self.next = durations, rest, {}

    def __call__(self, batch: int, rng: random.Random) -> float:
        done, taken = self.next.get(batch, 0), self.durations.get(batch, [])
        if done < len(taken):
            self.next[batch] = done + 1
            return taken[done]
        return self.rest(batch, rng)


def lane_rng(seed: int, stage: str, engine: str, batch: int) -> random.Random:
    return random.Random(zlib.crc32(f"{seed}/{stage}/{engine}/{batch}".encode()))


def service_times(config, scale: float, data: Path = DATA) -> dict:
    """{(stage, engine): sampler}: the simulator's model of the recorded times, every time x ``scale``."""
    from loadprobe.simulator import from_recording

    return {key: Scaled(sampler, scale) for key, sampler in from_recording(config, str(data)).items()}


def paired(samplers: dict, seed: int) -> dict:
    """The same samplers, each drawing from its lane's own stream -- as the router's executors do."""
    return {(stage, engine): OwnStream(s, seed, stage, engine) for (stage, engine), s in samplers.items()}


# -- arrivals ------------------------------------------------------------------------------------


def poisson(rate: float, seconds: float, seed: int) -> np.ndarray:
    from loadprobe import load

    return load.poisson(rate, duration=seconds, seed=seed)


def azure(speed: float, seconds: float, start_s: float) -> np.ndarray:
    """The Azure LLM 2023 code trace from ``start_s`` seconds in, ``speed`` times faster, ``seconds`` long."""
    from loadprobe import load

    times = load.arrivals(TRACE, preset="azure-llm-2023")
    return load.replay(times[times >= times[0] + int(start_s * 1e9)], speed=speed, duration=seconds)


def patterns(seconds: float, scale: float = 10.0, seed: int = 1, rate: float | None = None,
             speed: float | None = None, start_s: float = 2100.0) -> dict[str, np.ndarray]:
    """The two arrival patterns, at the same load relative to the service times whatever ``scale``.

    Poisson at 45 req/s (x10/scale) keeps the CPU ~60% busy. The trace from 35 min in (2,100 s),
    6x faster (x10/scale), averages ~28 req/s with bursts of 30-60 requests within a second,
    which fill the CPU's queue: some requests move to the GPU, some are turned away.
    """
    k = 10 / scale
    return {"poisson": poisson(rate or 45 * k, seconds, seed),
            "azure-llm-2023": azure(speed or 6 * k, seconds, start_s)}


# -- measured against predicted ------------------------------------------------------------------


@contextlib.contextmanager
def server_process(plan: str, scale: float, seed: int, first_offset: float, record: str | None = None):
    """The server subprocess; yields its port, stops it after. ``record``: loadprobe records the Router there."""
    with tempfile.TemporaryDirectory(prefix="loadprobe-fidelity-") as tmp:
        path = Path(tmp) / "pipeline.yaml"
        path.write_text(plan)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        if record:
            env.update(LOADPROBE_DIR=record, LOADPROBE_SERVICE="fidelity", LOADPROBE_SAMPLE_DEVICES="0")
        command = [sys.executable, "-m", "tests.support.fidelity_server", str(path), "--scale", repr(scale),
                   "--seed", str(seed), "--first-offset", repr(first_offset)]
        with subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True) as proc:
            port = None
            try:
                line = proc.stdout.readline()
                if not line.strip().isdigit():
                    raise RuntimeError(f"the fidelity server did not start (exit status {proc.poll()})")
                port = int(line)
                yield port
            finally:
                if port is not None:
                    with contextlib.suppress(OSError):
                        _get(port, "/stop")
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


@dataclass
class Comparison:
    """One arrival pattern, measured and predicted. ``rows``: metric, measured, predicted, error, limit, ok."""

    pattern: str
    requests: int
    rows: list = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(row["ok"] for row in self.rows if row["limit"] is not None)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def measure(plan: str, offsets: np.ndarray, *, scale: float, seed: int, record: str | None = None) -> dict:
    """Serve the Router, send ``offsets`` with the loadprobe load client: what the server and the client saw.
    ``record``: a directory where loadprobe records the Router's spans (as a deployment would)."""
    from loadprobe import load

    offsets = np.sort(np.asarray(offsets, dtype=float))
    with server_process(plan, scale, seed, float(offsets[0]), record) as port, \
            tempfile.TemporaryDirectory(prefix="loadprobe-fidelity-client-") as client_dir:
        _get(port, "/ping")
        report = load.run(f"http://127.0.0.1:{port}/infer", offsets, timeout=60, connections=1024,
                          record=client_dir)
        server = json.loads(_get(port, "/results"))
        client_ok_ms = _client_ok_latencies(client_dir)
    return {"server": server, "client_ok_ms": client_ok_ms, "lateness_ms": report.lateness_ms,
            "client_errors": report.errors}


def _client_ok_latencies(directory: str) -> list[float]:
    """Latencies (ms, from the intended send time) of the requests answered 200, from ``record=``'s spans."""
    import pyarrow.parquet as pq

    out: list[float] = []
    for path in Path(directory).rglob("spans-*.parquet"):
        table = pq.read_table(path, columns=["dur_ns", "status"]).to_pydict()
        out += [d / 1e6 for d, s in zip(table["dur_ns"], table["status"]) if s == "ok"]
    return out


def _percentiles_ms(values_ms) -> dict:
    """p50 and p95 by the simulator's own method (loadprobe's HdrHistogram, to 0.1%)."""
    from loadprobe.analysis.histogram import Histogram

    if not len(values_ms):
        return {50: None, 95: None}
    hist = Histogram()
    hist.record(np.round(np.asarray(values_ms) * 1e6).astype(np.int64))
    found = hist.percentiles((50, 95))
    return {p: found[p] / 1e6 for p in (50, 95)}


def compare(name: str, offsets: np.ndarray, *, scale: float = 10.0, seed: int = 1, draws: str = "paired",
            plan: str | None = None) -> Comparison:
    """Measure ``offsets`` on the real Router, simulate the same, compare."""
    from loadprobe import pipeline
    from loadprobe.simulator import simulate

    plan = plan or plan_text(scale)
    config = pipeline.loads(plan)
    started = time.perf_counter()
    measured = measure(plan, offsets, scale=scale, seed=seed)
    wall_s = time.perf_counter() - started
    server = measured["server"]
    records = sorted(server["records"])
    n = len(records)
    samplers = service_times(config, scale)

    def predict(arrivals, times):
        return simulate(config, arrivals, times, seed=seed)

    def times():
        return paired(samplers, seed) if draws == "paired" else samplers

    # the router's view: the arrivals it saw (submit times) and its latencies (submit to result)
    arrivals = np.array([r[1] for r in records])
    if draws == "paired":
        runs = [predict(arrivals, times())]
    else:  # the simulator's own draws, as a user would run it: INDEPENDENT_RUNS seeds, medians compared
        runs = [simulate(config, arrivals, samplers, seed=seed + 1000 + k) for k in range(INDEPENDENT_RUNS)]
    def median(values):
        values = list(values)
        return None if any(v is None for v in values) else float(np.median(values))

    predicted = {
        "p50": median(r.latency_ms["p50"] for r in runs),
        "p95": median(r.latency_ms["p95"] for r in runs),
        "rejected": median(r.outcomes["rejected"] / r.requests for r in runs),
        "timeout": median(r.outcomes["timeout"] / r.requests for r in runs),
        "failover": {s.name: median(r.stages[s.name]["failover_share"] for r in runs) for s in config.stages},
    }
    spread = None if len(runs) == 1 or predicted["p95"] is None else {
        p: [min(r.latency_ms[p] for r in runs), max(r.latency_ms[p] for r in runs)] for p in ("p50", "p95")}
    from_intended = predict(np.sort(offsets), times())
    fresh = paired(samplers, seed + 1)
    replayed: dict[tuple[str, str], dict[int, list[float]]] = {}
    for lane, taken in server["durations"].items():  # "stage/engine/batch"
        stage, engine, batch = lane.rsplit("/", 2)
        replayed.setdefault((stage, engine), {})[int(batch)] = taken
    from_durations = predict(arrivals, {key: Replayed(replayed.get(key, {}), fresh[key]) for key in samplers})

    outcomes = {k: sum(1 for r in records if r[3] == k) for k in ("ok", "rejected", "timeout", "error")}
    latency = _percentiles_ms([r[2] * 1000 for r in records if r[3] == "ok"])
    rows: list[dict] = []

    def relative(metric: str, m: float | None, p: float | None) -> None:
        err = None if m is None or p is None else p / m - 1
        rows.append({"metric": metric, "measured": m, "predicted": p, "error": err, "limit": P_LIMIT,
                     "ok": err is not None and abs(err) <= P_LIMIT})

    def share(metric: str, m: float, p: float, limit: float | None = SHARE_LIMIT) -> None:
        rows.append({"metric": metric, "measured": m, "predicted": p, "error": p - m, "limit": limit,
                     "ok": limit is None or abs(p - m) <= limit})

    relative("p50 ms", latency[50], predicted["p50"])
    relative("p95 ms", latency[95], predicted["p95"])
    share("rejected", outcomes["rejected"] / n, predicted["rejected"])
    stages = server["metrics"]["stages"]
    for i, stage in enumerate(config.stages):
        if stage.fallback is not None:
            # the simulator's failover share: moves / the stage's attempts (requests reaching it + retries)
            attempts = sum(1 for r in records if len(r[5]) >= i) + stages[stage.name]["retries"]
            share(f"failover {stage.name}", stages[stage.name]["failovers"] / attempts if attempts else 0.0,
                  predicted["failover"][stage.name])
    share("timed out", outcomes["timeout"] / n, predicted["timeout"], None)
    if outcomes["error"]:
        rows.append({"metric": "executor errors", "measured": outcomes["error"], "predicted": 0, "error": None,
                     "limit": 0, "ok": False})

    reasons: dict[str, int] = {}
    for r in records:
        if r[3] == "rejected":
            reasons[r[4]] = reasons.get(r[4], 0) + 1
    client = _percentiles_ms(measured["client_ok_ms"])
    overslept = server["overslept_ms"]
    info = {
        "scheduled": len(offsets), "served": n, "wall_s": round(wall_s, 1), "outcomes": outcomes,
        "scale": scale, "seed": seed, "draws": draws,
        "reject_reasons": {"measured": reasons, "predicted": dict(runs[0].rejects)},
        "client_ok_ms": {"p50": client[50], "p95": client[95]},
        "lateness_ms": measured["lateness_ms"], "client_errors": measured["client_errors"],
        "overslept_ms": overslept, "drawn_mean_ms": server["drawn_mean_ms"],
        "starved": bool(overslept and server["drawn_mean_ms"]
                        and (overslept["mean"] > STARVED_MEAN * server["drawn_mean_ms"]
                             or overslept["p99"] > STARVED_P99 * server["drawn_mean_ms"])),
        "from_intended_times": _brief(from_intended),
        "from_actual_durations": _brief(from_durations),
        "utilisation": {e: round(float(v["utilisation"]), 3) for e, v in runs[0].engines.items()},
        "independent_range_ms": spread,
    }
    return Comparison(name, n, rows, info)


FACTORS = (1.5, 2.0)  # the loads never recorded, as multiples of the recorded one


def extrapolate(name: str, offsets: np.ndarray, *, factors=FACTORS, scale: float = 10.0, seed: int = 1,
                plan: str | None = None) -> list[Comparison]:
    """From a recording at the rate of ``offsets``, predictions at ``factors`` x it against the real Router there.

    The Router runs ``offsets`` recorded by loadprobe, as a deployment would be. From that recording
    alone -- each stage's recorded executions (``from_recording``) and each request's recorded time
    outside every stage, the runtime's own hand-offs (``outside_stages``) -- the simulator predicts
    each faster schedule (the same arrivals, ``f`` x faster), drawing its own service times:
    ``INDEPENDENT_RUNS`` seeds, medians compared. The real Router then runs that schedule.
    """
    from loadprobe import pipeline
    from loadprobe.simulator import from_recording, simulate
    from loadprobe.simulator.recorded import outside_stages, read_self_times

    plan = plan or plan_text(scale)
    config = pipeline.loads(plan)
    out = []
    with tempfile.TemporaryDirectory(prefix="loadprobe-fidelity-recording-") as recording:
        base = np.sort(np.asarray(offsets, dtype=float))
        measure(plan, base, scale=scale, seed=seed, record=recording)
        recorded = read_self_times(recording)
        samplers = from_recording(config, recording, recorded=recorded)
        outside = outside_stages(recorded)
        for factor in factors:
            faster = base[0] + (base - base[0]) / factor
            measured = measure(plan, faster, scale=scale, seed=seed + 7)
            records = sorted(measured["server"]["records"])
            arrivals = np.array([r[1] for r in records])
            runs = [simulate(config, arrivals, samplers, seed=seed + 1000 + k, outside=outside)
                    for k in range(INDEPENDENT_RUNS)]
            latency = _percentiles_ms([r[2] * 1000 for r in records if r[3] == "ok"])
            rows = []
            for q in (50, 95):
                m = latency[q]
                values = [r.latency_ms[f"p{q}"] for r in runs]
                p = None if m is None or any(v is None for v in values) else float(np.median(values))
                err = None if p is None else p / m - 1
                rows.append({"metric": f"p{q} ms", "measured": m, "predicted": p, "error": err, "limit": P_LIMIT,
                             "ok": err is not None and abs(err) <= P_LIMIT})
            n = len(records)
            rejected = sum(1 for r in records if r[3] == "rejected") / n if n else 0.0
            rows.append({"metric": "rejected", "measured": rejected,
                         "predicted": float(np.median([r.outcomes["rejected"] / r.requests for r in runs])),
                         "error": None, "limit": None, "ok": True})
            rows[-1]["error"] = rows[-1]["predicted"] - rejected
            overslept = measured["server"]["overslept_ms"]
            drawn = measured["server"]["drawn_mean_ms"]
            out.append(Comparison(f"{name} at {factor:g}x", n, rows, {
                "factor": factor, "recorded_requests": len(base), "served": n, "scale": scale, "seed": seed,
                "outside_ms": {"p50": float(np.median(recorded.outside)) * 1000 if recorded.outside is not None
                               and len(recorded.outside) else None},
                "independent_range_ms": {f"p{q}": [min(r.latency_ms[f"p{q}"] for r in runs),
                                                   max(r.latency_ms[f"p{q}"] for r in runs)] for q in (50, 95)}
                if all(r.latency_ms["p95"] is not None for r in runs) else None,
                "starved": bool(overslept and drawn and (overslept["mean"] > STARVED_MEAN * drawn
                                                         or overslept["p99"] > STARVED_P99 * drawn)),
                "utilisation": {e: round(float(v["utilisation"]), 3) for e, v in runs[0].engines.items()}}))
    return out


def render_extrapolated(result: Comparison) -> str:
    i = result.info
    lines = [f"{result.pattern}: {result.requests} requests (recorded: {i['recorded_requests']} at 1x; time "
             f"outside the stages p50 {i['outside_ms']['p50'] or 0:.2f} ms)"]
    for row in result.rows:
        m, p, err, _ = _cells(row)
        flag = ("ok" if row["ok"] else "FAIL") if row["limit"] is not None else ""
        lines.append(f"  {row['metric']:<10} measured {m:>8}  predicted {p:>8}  {err:>8}  {flag}")
    r = i.get("independent_range_ms")
    if r:
        lines.append(f"  {INDEPENDENT_RUNS} simulations, own draws: p50 {r['p50'][0]:.1f} to {r['p50'][1]:.1f}, "
                     f"p95 {r['p95'][0]:.1f} to {r['p95'][1]:.1f} ms; utilisation {i['utilisation']}")
    return "\n".join(lines)


def _brief(result) -> dict:
    return {"p50": result.latency_ms["p50"], "p95": result.latency_ms["p95"],
            "rejected": result.outcomes["rejected"] / result.requests}


def run_pattern(name: str, offsets: np.ndarray, *, attempts: int = 2, **options) -> Comparison:
    """``compare``, measured again (up to ``attempts`` in all) while a miss comes with a starved harness."""
    for attempt in range(1, attempts + 1):
        result = compare(name, offsets, **options)
        result.info["attempt"] = attempt
        if result.ok or not result.info["starved"]:
            return result
    return result


def _cells(row: dict) -> tuple[str, str, str, str]:
    """A comparison row's measured, predicted, error and limit, as the tables print them."""
    if row["metric"].endswith("ms"):
        m = "-" if row["measured"] is None else f"{row['measured']:.1f}"
        p = "-" if row["predicted"] is None else f"{row['predicted']:.1f}"
        err = "-" if row["error"] is None else f"{row['error']:+.1%}"
        return m, p, err, f"{row['limit']:.0%}"
    if row["metric"] == "executor errors":
        return str(row["measured"]), "0", "-", "0"
    limit = "-" if row["limit"] is None else f"{100 * row['limit']:.0f} pt"
    return f"{row['measured']:.1%}", f"{row['predicted']:.1%}", f"{100 * row['error']:+.1f} pt", limit


def render(result: Comparison) -> str:
    i = result.info
    again = f", measured {i['attempt']} times (the machine was busy)" if i.get("attempt", 1) > 1 else ""
    lines = [f"{result.pattern}: {result.requests} requests, {i['outcomes']['ok']} ok, "
             f"{i['outcomes']['rejected']} rejected, {i['outcomes']['timeout']} timed out; {i['wall_s']} s{again}",
             f"  {'':<18} {'measured':>9} {'predicted':>10} {'error':>9} {'limit':>7}"]
    for row in result.rows:
        m, p, err, limit = _cells(row)
        flag = "" if row["limit"] is None else ("ok" if row["ok"] else "FAIL")
        lines.append(f"  {row['metric']:<18} {m:>9} {p:>10} {err:>9} {limit:>7}  {flag}")
    o, c, late = i["overslept_ms"] or {}, i["client_ok_ms"], i["lateness_ms"] or {}
    lines += [
        f"  client side (200s, from the intended send time): p50 {c['p50']:.1f}  p95 {c['p95']:.1f} ms; "
        f"sends late by p99 {late.get('p99', 0):.2f} ms",
        f"  executors woke late by {o.get('mean', 0):.3f} ms mean, {o.get('p99', 0):.3f} ms p99 "
        f"(mean service time {i['drawn_mean_ms']:.2f} ms)",
    ]
    for key, label in (("from_intended_times", "simulated from the intended send times"),
                       ("from_actual_durations", "simulated with the executions' actual durations")):
        f = i[key]
        lines.append(f"  {label}: p50 {f['p50']:.1f}  p95 {f['p95']:.1f} ms, rejected {f['rejected']:.1%}")
    if i.get("independent_range_ms"):
        r = i["independent_range_ms"]
        lines.append(f"  {INDEPENDENT_RUNS} simulations with their own draws (medians above): p50 "
                     f"{r['p50'][0]:.1f} to {r['p50'][1]:.1f}, p95 {r['p95'][0]:.1f} to {r['p95'][1]:.1f} ms")
    lines.append(f"  rejects by reason: measured {i['reject_reasons']['measured']}, "
                 f"predicted {i['reject_reasons']['predicted']}")
    return "\n".join(lines)
