"""Sustained recording: spans/s across 2 threads, zero loss at 100k spans/s, peak RSS at 1M spans/s offered.

    python benchmarks/bench_recorder.py [--seconds 10]

Each scenario runs in a fresh interpreter so its peak RSS is its own. Peers in the same
run: the floor decorator (two perf_counter_ns() reads and a list append, drained by
nobody) for throughput, and the same loop with no recorder started for memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

SCENARIO = textwrap.dedent('''
    import json, os, sys, tempfile, threading, time
    from time import perf_counter_ns
    import psutil
    import loadprobe
    from loadprobe import probe

    mode, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    proc = psutil.Process()
    peak = [proc.memory_info().rss]
    baseline = peak[0]
    done = threading.Event()

    def watch_rss():
        while not done.wait(0.005):
            peak[0] = max(peak[0], proc.memory_info().rss)

    def work(i):
        return i

    if mode == "floor":
        sink = []
        def stage(i):
            t0 = perf_counter_ns(); r = work(i); sink.append((t0, perf_counter_ns())); return r
    else:
        stage = probe("stage")(work)
    out = tempfile.mkdtemp()
    if mode == "probe":
        loadprobe.start(out, sample_devices=False)
    offered = [0, 0]

    def produce(t):
        # Paced open loop: 500-call bursts on a schedule; rate 0 means as fast as possible.
        per_thread = rate / 2
        start = time.perf_counter()
        n = 0
        while True:
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
            if per_thread and n >= per_thread * elapsed + 500:
                time.sleep(0.0005)
                continue
            for i in range(500):
                stage(i)
            n += 500
        offered[t] = n

    watcher = threading.Thread(target=watch_rss, daemon=True)
    watcher.start()
    threads = [threading.Thread(target=produce, args=(t,)) for t in range(2)]
    t0 = time.perf_counter()
    for th in threads: th.start()
    for th in threads: th.join()
    elapsed = time.perf_counter() - t0
    stats = loadprobe.stop() if mode == "probe" else None
    done.set()
    watcher.join()
    print(json.dumps({
        "mode": mode, "offered": sum(offered), "seconds": elapsed,
        "offered_per_s": sum(offered) / elapsed,
        "written": stats.spans_written if stats else None,
        "dropped": stats.spans_dropped if stats else None,
        "recorded": stats.spans_recorded if stats else None,
        "peak_rss_mb": peak[0] / 2**20, "baseline_rss_mb": baseline / 2**20,
    }))
''')


def run(mode: str, rate: float, seconds: float) -> dict:
    done = subprocess.run([sys.executable, "-c", SCENARIO, mode, str(rate), str(seconds)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    s = args.seconds

    fast_floor = run("floor", 0, min(s, 5))
    fast_probe = run("probe", 0, min(s, 5))
    print(f"max rate, 2 threads: floor {fast_floor['offered_per_s']:,.0f} calls/s, "
          f"@probe {fast_probe['offered_per_s']:,.0f} spans/s offered, "
          f"{fast_probe['written'] / fast_probe['seconds']:,.0f} written/s, dropped {fast_probe['dropped']:,} "
          f"({fast_probe['offered_per_s'] / fast_floor['offered_per_s']:.2f}x the floor's rate)")

    paced = run("probe", 100_000, s)
    lost = paced["offered"] - paced["written"]
    print(f"100k spans/s for {s:.0f} s: offered {paced['offered']:,} ({paced['offered_per_s']:,.0f}/s), "
          f"written {paced['written']:,}, dropped {paced['dropped']:,}, lost {lost:,}")

    sustained = {}
    for rate in (150_000, 200_000, 300_000, 400_000):
        result = run("probe", rate, 5)
        sustained[rate] = result
        print(f"  paced {rate:,}/s for 5 s: achieved {result['offered_per_s']:,.0f}/s, dropped {result['dropped']:,}")
    lossless = [r for r, res in sustained.items() if res["dropped"] == 0 and res["offered_per_s"] >= 0.98 * r]
    print(f"highest paced rate with zero loss: {max(lossless, default=100_000):,} spans/s")

    flood = run("probe", 1_000_000, s)
    idle = run("none", 1_000_000, s)
    print(f"1M spans/s offered for {s:.0f} s (achieved {flood['offered_per_s']:,.0f}/s): peak RSS "
          f"{flood['peak_rss_mb']:.0f} MiB (start {flood['baseline_rss_mb']:.0f}) vs "
          f"{idle['peak_rss_mb']:.0f} MiB with no recorder; written {flood['written']:,}, "
          f"dropped {flood['dropped']:,}; recorded = offered = written + dropped: "
          f"{flood['recorded'] == flood['offered'] == flood['written'] + flood['dropped']}")
    print(json.dumps({"sustained": sustained, "fast_floor": fast_floor, "fast_probe": fast_probe, "paced_100k": paced,
                      "flood_1m": flood, "flood_no_recorder": idle}))


if __name__ == "__main__":
    main()
