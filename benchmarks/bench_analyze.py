"""Analysis benchmark: a full loadprobe portrait against the same core figures from pandas and DuckDB.

    python benchmarks/bench_analyze.py --spans 10000000 [--spans 100000000] [--data DIR] [--json PATH]
        [--repeat 3] [--src SNAPSHOT_DIR]
        [--contenders loadprobe-inprocess,loadprobe-process,loadprobe-numpy,pandas,duckdb]

For each ``--spans`` size it generates (or reuses) a recorded dataset with
``benchmarks/gen_spans.py`` under ``DIR/spans-<N>`` (default DIR: /tmp/loadprobe-bench; keep
it out of the repository, 100M spans take ~1.6 GB), reads every file to warm the page cache
before each run (pandas's 11 GB at 100M, or a VM reclaiming idle page cache, can evict it), and
runs each contender in a fresh interpreter, ``--repeat`` rounds interleaved, pandas's rounds last
(after freeing its memory the VM is slow to allocate for a while):

- ``loadprobe inprocess``: ``loadprobe.analyze([DIR])`` (the whole portrait), saved to a
  temporary portrait.json;
- ``loadprobe process x2``: the same with ``engine="process", workers=2``;
- ``loadprobe numpy``: in-process with ``kernel="numpy"`` (the reference map step, without the
  compiled C kernel), to show what the kernel buys in the same run;
- ``pandas``: the obvious code, ``pd.concat`` of ``pd.read_parquet(f, columns=...)`` over all
  files, then per-stage p50/p95/p99 of dur_ns, per-minute counts of root spans and batch
  value counts per stage;
- ``duckdb``: the same three results from one SQL script over
  ``read_parquet('DIR/*/*/*/spans-*.parquet')`` with ``PRAGMA threads=2``.

Each child runs under ``RLIMIT_AS`` (``--mem-limit-gb``, default 20) and a timeout; the parent
polls the child's process tree with psutil every 20 ms for peak RSS (the tree's total, the
main process and the largest other process) and kills the tree if its total RSS passes
``--kill-rss-gb`` (default 21.5), so the machine never swaps or hangs. The child also reports
``ru_maxrss`` of itself and of its waited-for children (exact per-process peaks).

Wall time is measured by the parent from launch to exit (interpreter start and imports
included); ``compute s`` is the time inside the child after its imports. The results are
cross-checked: loadprobe's per-stage p50/p95/p99 against DuckDB's exact ``quantile_cont``
(within the histogram's documented relative error), pandas against DuckDB, and the per-minute
root counts and batch distributions of all contenders against each other.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GLOB = "*/*/*/spans-*.parquet"
POLL_S = 0.020
TREE_EVERY = 5  # polls between listings of the process tree (RSS itself is read every poll)
MIB = 1024 * 1024
LOADPROBE_RELATIVE_ERROR = 1.0 / 1024  # loadprobe.analysis.histogram.RELATIVE_ERROR (3 significant digits)

CONTENDERS = {
    "loadprobe-inprocess": "loadprobe analyze, engine=inprocess",
    "loadprobe-process": "loadprobe analyze, engine=process, 2 workers",
    "loadprobe-numpy": "loadprobe analyze, engine=inprocess, kernel=numpy",
    "pandas": "pandas read_parquet + concat + groupby",
    "duckdb": "DuckDB SQL, 2 threads",
}
PERCENTILES = (0.5, 0.95, 0.99)

DUCKDB_SCRIPT = """
PRAGMA threads=2;
CREATE VIEW spans AS SELECT * FROM read_parquet('{glob}');
SELECT stage, quantile_cont(dur_ns, [0.5, 0.95, 0.99]) AS p FROM spans GROUP BY stage ORDER BY stage;
SELECT ts_ns // 60000000000 AS minute, count(*) AS n FROM spans WHERE parent_id IS NULL GROUP BY minute ORDER BY minute;
SELECT stage, batch, count(*) AS n FROM spans WHERE batch IS NOT NULL GROUP BY stage, batch ORDER BY stage, batch;
"""


# -- contenders (run in the child) ---------------------------------------------------------


def run_loadprobe(data: str, engine: str, workers: int, src: str, kernel: str = "auto") -> dict:
    sys.path.insert(0, src)
    import loadprobe

    if not Path(loadprobe.__file__).resolve().is_relative_to(Path(src).resolve()):
        raise RuntimeError(f"imported {loadprobe.__file__}, not the loadprobe under {src}")

    t = time.perf_counter()
    portrait = loadprobe.analyze([data], engine=engine, workers=workers, kernel=kernel)
    with tempfile.TemporaryDirectory(prefix="bench-portrait-") as tmp:
        path = portrait.save(Path(tmp) / "portrait.json")
        compute = time.perf_counter() - t
        saved = json.loads(path.read_text(encoding="utf-8"))
        portrait_bytes = path.stat().st_size
    import hashlib

    digest = hashlib.sha256(json.dumps({k: v for k, v in saved.items() if k != "generated_at"},
                                       sort_keys=True).encode()).hexdigest()
    pcts, batch = {}, {}
    for stage in saved["stages"]:
        lat = stage["latency_ms"]
        pcts[stage["name"]] = [lat["p50"] * 1e6, lat["p95"] * 1e6, lat["p99"] * 1e6]
        if stage.get("batch"):
            batch[stage["name"]] = {str(int(k)): int(v) for k, v in stage["batch"]["distribution"].items()}
    per_minute: dict = {}
    traffic = saved["traffic"]
    for start_s, n in traffic["series"]:  # per second up to 3 hours of data
        if traffic["bucket_s"] > 60:
            raise RuntimeError("traffic buckets are coarser than a minute")
        key = str(int(start_s) // 60)
        per_minute[key] = per_minute.get(key, 0) + int(n)
    from loadprobe.analysis import kernels

    compiled = kernel != "numpy" and kernels.kernel_available()
    return {"compute_s": compute, "pcts": pcts, "per_minute": {k: v for k, v in per_minute.items() if v},
            "kernel": "c" if compiled else "numpy", "portrait_sha256": digest,
            "batch": batch, "rows": saved["data_quality"]["rows"], "portrait_bytes": portrait_bytes,
            "stages": len(saved["stages"]), "bottlenecks": [b["kind"] for b in saved["bottlenecks"]]}


def run_pandas(data: str) -> dict:
    import glob

    import pandas as pd

    t = time.perf_counter()
    files = sorted(glob.glob(f"{data}/{GLOB}"))
    df = pd.concat([pd.read_parquet(f, columns=["ts_ns", "dur_ns", "stage", "parent_id", "batch"]) for f in files],
                   ignore_index=True)
    pcts = df.groupby("stage", observed=True)["dur_ns"].quantile(list(PERCENTILES)).unstack()
    roots = df[df["parent_id"].isna()]
    per_minute = (roots["ts_ns"] // 60_000_000_000).value_counts().sort_index()
    batch = df.groupby("stage", observed=True)["batch"].value_counts()
    compute = time.perf_counter() - t
    out_batch: dict = {}
    for (stage, size), n in batch.items():
        out_batch.setdefault(str(stage), {})[str(int(size))] = int(n)
    return {"compute_s": compute, "rows": len(df),
            "pcts": {str(s): [float(v) for v in row] for s, row in zip(pcts.index, pcts.to_numpy())},
            "per_minute": {str(int(k)): int(v) for k, v in per_minute.items()}, "batch": out_batch}


def run_duckdb(data: str) -> dict:
    import duckdb

    t = time.perf_counter()
    con = duckdb.connect()
    results = []
    for statement in DUCKDB_SCRIPT.format(glob=f"{data}/{GLOB}").strip().split(";\n"):
        if statement.strip():
            rows = con.execute(statement).fetchall()
            if statement.lstrip().upper().startswith("SELECT"):
                results.append(rows)
    compute = time.perf_counter() - t
    pct_rows, minute_rows, batch_rows = results
    out_batch: dict = {}
    for stage, size, n in batch_rows:
        out_batch.setdefault(stage, {})[str(int(size))] = int(n)
    return {"compute_s": compute, "pcts": {stage: [float(v) for v in p] for stage, p in pct_rows},
            "per_minute": {str(int(m)): int(n) for m, n in minute_rows}, "batch": out_batch,
            "roots": sum(int(n) for _, n in minute_rows)}


def child_main(args) -> int:
    import resource

    if args.mem_limit_gb:
        limit = int(args.mem_limit_gb * 1024**3)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        if args.child == "loadprobe-inprocess":
            out = run_loadprobe(args.dataset, "inprocess", 1, args.src)
        elif args.child == "loadprobe-process":
            out = run_loadprobe(args.dataset, "process", args.workers, args.src)
        elif args.child == "loadprobe-numpy":
            out = run_loadprobe(args.dataset, "inprocess", 1, args.src, kernel="numpy")
        elif args.child == "pandas":
            out = run_pandas(args.dataset)
        elif args.child == "duckdb":
            out = run_duckdb(args.dataset)
        else:
            raise SystemExit(f"unknown contender {args.child}")
        status = 0
    except BaseException as exc:  # MemoryError, ArrowMemoryError, duckdb.OutOfMemoryException...
        out = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500],
               "traceback": traceback.format_exc()[-4000:]}
        status = 3
    out["ru_maxrss_self_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["ru_maxrss_children_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    Path(args.result).write_text(json.dumps(out), encoding="utf-8")
    return status


# -- the parent: data, measurement, checks, tables -----------------------------------------


def ensure_data(base: Path, spans: int, seed: int) -> Path:
    path = base / f"spans-{spans}"
    marker = path / ".gen_spans.json"
    if marker.exists():
        info = json.loads(marker.read_text(encoding="utf-8"))
        if info.get("requested_spans") == spans and info.get("seed") == seed:
            print(f"reusing {path} ({info['spans']:,} spans, {info['files']} files)", flush=True)
            return path
    if path.exists() and any(path.iterdir()):
        raise SystemExit(f"{path} exists without a complete generator marker; remove it first")
    print(f"generating {spans:,} spans under {path} ...", flush=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, str(HERE / "gen_spans.py"), str(path), "--spans", str(spans),
                    "--seed", str(seed)], check=True)
    print(f"generated in {time.perf_counter() - t:.1f} s", flush=True)
    return path


def byte_compile(src: str) -> None:
    """Compile the measured package's modules to bytecode first, as ``pip install`` does for an
    installed package (and as DuckDB's and pandas's already are): an environment with
    PYTHONDONTWRITEBYTECODE set would otherwise have every loadprobe run compile its sources
    again (~50 ms)."""
    import compileall

    compileall.compile_dir(str(Path(src) / "loadprobe"), quiet=1)


def warm_cache(path: Path) -> int:
    total = 0
    for f in sorted(path.glob(GLOB)):
        with open(f, "rb") as handle:
            while chunk := handle.read(16 * MIB):
                total += len(chunk)
    return total


def measure(name: str, data: Path, args) -> dict:
    import psutil
    import resource

    with tempfile.TemporaryDirectory(prefix="bench-analyze-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--dataset", str(data),
               "--result", str(result_file), "--workers", str(args.workers), "--mem-limit-gb", str(args.mem_limit_gb),
               "--src", str(Path(args.src).resolve())]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_before = os.getloadavg()[0]  # other work on the machine, which every wall time includes
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ps = psutil.Process(proc.pid)
        peak_total = peak_main = peak_other = 0
        peak_procs = 1
        killed = None
        tree, polls = [ps], 0
        while proc.poll() is None:
            if polls % TREE_EVERY == 0:  # listing children scans /proc: refresh the tree every 100 ms
                try:
                    tree = [ps] + ps.children(recursive=True)
                except psutil.NoSuchProcess:
                    break
            polls += 1
            total = 0
            for p in tree:
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                if p.pid == proc.pid:
                    peak_main = max(peak_main, rss)
                else:
                    peak_other = max(peak_other, rss)
            peak_total = max(peak_total, total)
            peak_procs = max(peak_procs, len(tree))
            elapsed = time.perf_counter() - t0
            reason = None
            if total > args.kill_rss_gb * 1024**3:
                reason = f"killed: out of memory (process tree RSS passed {args.kill_rss_gb} GiB)"
            elif elapsed > args.timeout:
                reason = f"did not finish: killed after {args.timeout} s"
            if reason:
                killed = reason
                for p in reversed(tree):
                    try:
                        p.kill()
                    except psutil.Error:
                        pass
                break
            time.sleep(POLL_S)
        output, _ = proc.communicate()
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = json.loads(result_file.read_text(encoding="utf-8")) if result_file.exists() else {}
    row = {"contender": name, "label": CONTENDERS[name], "spans": None, "wall_s": wall,
           "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
           "peak_rss_tree_mib": peak_total / MIB, "peak_rss_main_mib": peak_main / MIB,
           "peak_rss_other_mib": peak_other / MIB if peak_other else None, "processes": peak_procs,
           "returncode": proc.returncode, "load_avg_1m_before": load_before,
           **{k: v for k, v in res.items() if k not in ("traceback",)}}
    if killed:
        row["status"] = killed
    elif proc.returncode != 0:
        err = res.get("error", "")
        oom = any(s in err for s in ("MemoryError", "Out of Memory", "OutOfMemory", "malloc", "allocate"))
        if proc.returncode < 0:
            row["status"] = f"killed by signal {-proc.returncode}"
        else:
            row["status"] = ("failed: out of memory" if oom else "failed") + (f" ({err})" if err else "")
        row["traceback"] = res.get("traceback") or output[-4000:]
    else:
        row["status"] = "ok"
    if output.strip() and row["status"] != "ok":
        row["output_tail"] = output[-2000:]
    return row


def summarise(runs: list[dict]) -> dict:
    """One row per contender: the median run by wall time (all runs kept under "runs"), peak RSS the max."""
    ok = [r for r in runs if r["status"] == "ok"]
    if len(ok) != len(runs) or len(runs) == 1:
        row = dict(runs[-1] if len(ok) != len(runs) else runs[0])
    else:
        ordered = sorted(ok, key=lambda r: r["wall_s"])
        row = dict(ordered[(len(ordered) - 1) // 2])
        for key in ("peak_rss_tree_mib", "peak_rss_main_mib", "peak_rss_other_mib", "ru_maxrss_self_mib",
                    "ru_maxrss_children_mib"):
            values = [r[key] for r in ok if r.get(key) is not None]
            row[key] = max(values) if values else None
    row["repeats"] = len(runs)
    if len(runs) > 1:
        row["runs"] = [{k: r.get(k) for k in ("status", "wall_s", "compute_s", "cpu_s", "peak_rss_tree_mib",
                                               "peak_rss_main_mib", "peak_rss_other_mib", "load_avg_1m_before")}
                       for r in runs]
        row["wall_s_all"] = [round(r["wall_s"], 2) for r in runs]
    return row


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))


def agreement(rows: list[dict]) -> dict:
    by = {r["contender"]: r for r in rows if r["status"] == "ok"}
    out: dict = {"bound": LOADPROBE_RELATIVE_ERROR}
    digests = {name: r.get("portrait_sha256") for name, r in by.items() if name.startswith("loadprobe")}
    out["loadprobe_portraits_identical"] = len(set(digests.values())) <= 1 if digests else None
    out["loadprobe_kernels"] = {name: by[name].get("kernel") for name in digests}
    ref = by.get("duckdb")
    if ref is None:
        return out
    for name, r in by.items():
        if name == "duckdb":
            continue
        worst, where = 0.0, "all exact"
        for stage, exact in ref["pcts"].items():
            got = r["pcts"].get(stage)
            if got is None:
                worst, where = float("inf"), f"{stage} missing"
                continue
            for p, g, e in zip(("p50", "p95", "p99"), got, exact):
                d = rel(g, e)
                if d > worst:
                    worst, where = d, f"{stage} {p}: {g:.0f} vs {e:.1f} ns"
        out[name] = {
            "max_rel_diff_vs_duckdb": worst,
            "where": where,
            "within_bound": worst <= LOADPROBE_RELATIVE_ERROR if name.startswith("loadprobe") else None,
            "per_minute_equal": r["per_minute"] == ref["per_minute"],
            "per_minute_minutes": len(r["per_minute"]),
            "roots": sum(r["per_minute"].values()),
            "batch_equal": r["batch"] == ref["batch"],
        }
    return out


def fmt_rss(r: dict) -> str:
    if r["contender"] == "loadprobe-process" and r.get("peak_rss_other_mib"):
        return (f"{r['peak_rss_tree_mib']:,.0f} total (main {r['peak_rss_main_mib']:,.0f}, "
                f"worker max {r['peak_rss_other_mib']:,.0f})")
    return f"{r['peak_rss_tree_mib']:,.0f}"


def table(rows: list[dict]) -> str:
    many = any(r.get("repeats", 1) > 1 for r in rows)
    lines = ["| contender | spans | wall s | compute s | CPU s | peak RSS MiB | wall vs loadprobe | RSS vs loadprobe | result |"
             + (" wall s, every run |" if many else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---|" + ("---|" if many else "")]
    base = {}
    for r in rows:
        if r["contender"] == "loadprobe-inprocess" and r["status"] == "ok":
            base[r["spans"]] = r
    for r in rows:
        b = base.get(r["spans"])
        ok = r["status"] == "ok"
        wall_ratio = f"{r['wall_s'] / b['wall_s']:.2f}x" if b and ok else "–"
        rss_ratio = f"{r['peak_rss_tree_mib'] / b['peak_rss_tree_mib']:.2f}x" if b and ok else "–"
        compute = f"{r['compute_s']:.1f}" if "compute_s" in r else "–"
        wall = f"{r['wall_s']:.1f}" if ok else f"({r['wall_s']:.1f})"
        lines.append(f"| {r['label']} | {r['spans'] / 1e6:g}M | {wall} | {compute} | {r['cpu_s']:.1f} | "
                     f"{fmt_rss(r)} | {wall_ratio} | {rss_ratio} | {r['status']} |"
                     + (f" {', '.join(f'{w:.1f}' for w in r.get('wall_s_all', [r['wall_s']]))} |" if many else ""))
    return "\n".join(lines)


def provenance(src: str) -> dict:
    """Which loadprobe was measured: the source directory, its git commit and whether it had local edits."""
    out = {"src": str(Path(src).resolve())}
    for key, cmd in (("commit", ["git", "rev-parse", "HEAD"]),
                     ("dirty", ["git", "status", "--porcelain", "--", "loadprobe"])):
        try:
            text = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            text = ""
        out[key] = text if key == "commit" else bool(text)
    snapshot = Path(src) / ".snapshot-commit"
    if not out["commit"] and snapshot.exists():
        out["commit"] = snapshot.read_text(encoding="utf-8").strip()
        out["dirty"] = False
    return out


def machine() -> dict:
    import psutil

    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    versions = {}
    for pkg in ("pyarrow", "pandas", "duckdb", "numpy", "psutil"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"cpu": model, "logical_cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 1024**3, 1),
            "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}", "versions": versions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, action="append", help="dataset size; repeat for several (default 10M)")
    parser.add_argument("--data", default="/tmp/loadprobe-bench", help="where datasets live (DIR/spans-<N>)")
    parser.add_argument("--json", default=None, help="raw results (default DIR/bench_analyze.json)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated subset")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per contender, interleaved (pandas's last); the row shows the median wall time and the max RSS")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per contender")
    parser.add_argument("--mem-limit-gb", type=float, default=20.0, help="RLIMIT_AS per child process")
    parser.add_argument("--kill-rss-gb", type=float, default=21.5, help="kill a contender whose tree RSS passes this")
    parser.add_argument("--src", default=str(REPO),
                        help="directory holding the loadprobe package to benchmark (default: this checkout); "
                             "e.g. a `git archive` snapshot, so edits made during the run cannot leak in")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.exit(child_main(args))

    sizes = args.spans or [10_000_000]
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    if any(name.startswith("loadprobe") for name in names):
        byte_compile(args.src)
    for n in names:
        if n not in CONTENDERS:
            parser.error(f"unknown contender {n}; choose from {', '.join(CONTENDERS)}")
    base = Path(args.data)
    json_path = Path(args.json) if args.json else base / "bench_analyze.json"
    started = datetime.now(timezone.utc)
    report = {"date": started.isoformat(timespec="seconds"), "machine": machine(), "command": sys.argv,
              "loadprobe": provenance(args.src),
              "mem_limit_gb": args.mem_limit_gb, "kill_rss_gb": args.kill_rss_gb, "timeout_s": args.timeout,
              "repeat": args.repeat, "sizes": []}
    all_rows = []
    for spans in sizes:
        data = ensure_data(base, spans, args.seed)
        info = json.loads((data / ".gen_spans.json").read_text(encoding="utf-8"))
        t = time.perf_counter()
        nbytes = warm_cache(data)
        print(f"warmed page cache: {nbytes / 1e9:.2f} GB in {time.perf_counter() - t:.1f} s", flush=True)
        runs: dict = {name: [] for name in names}
        # Interleaved rounds, but pandas's runs after all the others': freeing its ~11 GB at 100M
        # leaves the VM slow to hand out memory again for a minute or more (the next contender took
        # 45 s instead of 5 at 11 s of CPU, with the files in the page cache).
        order = [name for name in names if name != "pandas"], [name for name in names if name == "pandas"]
        for group, round_ in itertools.product(order, range(args.repeat)):
            for name in group:
                if runs[name] and runs[name][-1]["status"] != "ok":
                    continue  # failed once (out of memory, timeout): do not repeat it
                print(f"[{spans / 1e6:g}M, run {round_ + 1}/{args.repeat}] {CONTENDERS[name]} ...", end=" ", flush=True)
                warm_cache(data)  # again: pandas's memory, or the VM's reclaim of idle pages, may have evicted it
                row = measure(name, data, args)
                row["spans"] = info["spans"]
                runs[name].append(row)
                print(f"{row['status']}: wall {row['wall_s']:.1f} s, CPU {row['cpu_s']:.1f} s, peak RSS {fmt_rss(row)} MiB"
                      f" (load average before: {row['load_avg_1m_before']:.2f})", flush=True)
                if row["status"] != "ok" and row.get("traceback"):
                    print(row["traceback"], flush=True)
        rows = [summarise(runs[name]) for name in names]
        check = agreement(rows)
        report["sizes"].append({"spans": info["spans"], "files": info["files"], "dataset_bytes": nbytes,
                                "generator_seconds": info.get("seconds"), "results": rows, "agreement": check})
        all_rows += rows
        print()
        print(table(rows))
        print()
        print_agreement(check)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    if len(sizes) > 1:
        print()
        print(table(all_rows))
    print(f"\nraw results: {json_path}")


def print_agreement(check: dict) -> None:
    bound = check["bound"]
    if check.get("loadprobe_kernels"):
        print(f"loadprobe portraits identical across {', '.join(f'{k} ({v})' for k, v in check['loadprobe_kernels'].items())}"
              f" (whole portrait.json but its timestamp): {check['loadprobe_portraits_identical']}")
    for name, c in check.items():
        if name in ("bound", "loadprobe_portraits_identical", "loadprobe_kernels"):
            continue
        verdict = "" if c["within_bound"] is None else (" (within" if c["within_bound"] else " (OUTSIDE") + \
            f" loadprobe's {bound:.4%} bound)"
        print(f"{name}: max relative difference of p50/p95/p99 vs DuckDB {c['max_rel_diff_vs_duckdb']:.5%}"
              f"{verdict} at {c['where']}; per-minute root counts equal: {c['per_minute_equal']} "
              f"({c['per_minute_minutes']} minutes, {c['roots']:,} roots); batch counts equal: {c['batch_equal']}")


if __name__ == "__main__":
    main()
