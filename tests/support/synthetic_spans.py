"""A realistic recorded span dataset in the loadprobe layout, at any size, fast and deterministic.

``benchmarks/gen_spans.py`` writes it from the command line (bench_analyze.py's datasets);
tests/analysis/test_analyze_fast.py maps a small one with both kernels. Usage::

    from tests.support.synthetic_spans import generate
    marker = generate(out_dir, spans=40_000, seed=3, jobs=1, quiet=True)

Writes ``OUT/<host>/<service>/<pid>-<stamp>/spans-NNNNN.parquet`` plus a run.json per run
directory (docs/data-format.md), schema exactly ``loadprobe.schema.SPANS``, written as the
recorder writes them (``schema.parquet_options`` and ``write_row_groups``: delta-encoded
integers, LZ4 on strings and floats, rows grouped by stage in each row group), row groups
of 131,072 rows, 1,000,000 rows per file (the last file of a run may be shorter).

The traffic: an object-detection service on 2 hosts x 2 processes (4 run directories,
load-balanced evenly), requests arriving over 2 hours along a diurnal-ish rate curve with
a slow wobble, bursts and per-second noise. Each request is 4 spans: the root (stage
``request``, parent null, request_id ``<run>-<n>``) and its children ``preprocess`` (cpu,
lognormal ~3 ms), ``backbone`` (npu, batch mean ~3 with a tail to 32, shape
``4x3x640x640`` mostly, flops and bytes set, a batching queue time) and ``nms`` (gpu0,
dynamic shapes ``Nx4``). Children lie inside the root's time window; span ids are unique
per run directory. Rows are in the order a recorder writes them (by span end).

Everything is vectorised with numpy and pyarrow, one file at a time (memory is bounded by
one file per job), and seeded per (run, file): the same arguments give the same bytes,
whatever ``jobs``. A hidden ``OUT/.gen_spans.json`` records the parameters once
complete, so callers can reuse the data.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loadprobe._version import __version__
from loadprobe.schema import SPANS, parquet_options, write_row_groups

ROWS_PER_FILE = 1_000_000
SPANS_PER_REQUEST = 4
REQUESTS_PER_FILE = ROWS_PER_FILE // SPANS_PER_REQUEST
ROW_GROUP = 131_072
DURATION_S = 7_200  # two hours of traffic
T0_NS = 1_796_198_400 * 10**9  # 2026-12-02T08:00:00Z
SERVICE = "vision"
HOSTS = ("infer-01", "infer-02")
PROCESSES_PER_HOST = 2
STAGES = ["request", "preprocess", "backbone", "nms"]
STATUSES = ["ok", "error", "timeout", "cancelled"]
ENGINES = ["cpu", "npu", "gpu0"]
PRE_SHAPES = ["1080x1920x3", "720x1280x3", "2160x3840x3"]
BACKBONE_SHAPES = ["4x3x640x640", "8x3x640x640", "32x3x640x640"]
MAX_BOXES = 8400
BACKBONE_FLOPS_PER_ITEM = 8.7e9  # YOLOv8n at 640x640
BACKBONE_WEIGHT_BYTES = 6.3e6
BACKBONE_BYTES_PER_ITEM = 58.0e6
MARKER = ".gen_spans.json"
MS = 1_000_000


def runs_layout(seed: int) -> list[dict]:
    """The 4 run directories: host, pid, run_id and process start time, fixed by ``seed``."""
    rng = np.random.default_rng([seed, 0xA11])
    out = []
    for h, host in enumerate(HOSTS):
        for p in range(PROCESSES_PER_HOST):
            pid = int(rng.integers(2_000, 60_000))
            started_ns = T0_NS - int(rng.integers(1, 30)) * 10**9 - int(rng.integers(0, 1000)) * MS
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started_ns // 10**9))
            run_id = f"{pid}-{stamp}.{(started_ns // MS) % 1000:03d}Z"
            out.append({"index": h * PROCESSES_PER_HOST + p, "host": host, "pid": pid, "run_id": run_id,
                        "started_ns": started_ns})
    return out


def rate_curve(seed: int) -> np.ndarray:
    """Relative request rate per second over the two hours: diurnal-ish rise and fall, wobble, bursts, noise."""
    rng = np.random.default_rng([seed, 0xC0FFEE])
    t = np.arange(DURATION_S, dtype=np.float64)
    x = t / DURATION_S
    rate = 0.35 + 0.65 * np.sin(np.pi * (0.15 + 0.8 * x)) ** 2  # morning ramp to a peak, then a decline
    rate *= 1.0 + 0.08 * np.sin(2 * np.pi * t / 900.0)  # 15-minute wobble
    for _ in range(8):  # bursts: 20-120 s at 1.6-3x
        start = int(rng.integers(0, DURATION_S - 120))
        length = int(rng.integers(20, 120))
        rate[start:start + length] *= rng.uniform(1.6, 3.0)
    rate *= rng.lognormal(0.0, 0.12, DURATION_S)  # per-second noise
    return rate / rate.sum()


def plan(total_spans: int, seed: int) -> tuple[list[dict], list[tuple[int, int, int]]]:
    """(runs, jobs): each job is (run index, file number, request count), requests split evenly over runs."""
    requests = total_spans // SPANS_PER_REQUEST
    runs = runs_layout(seed)
    jobs = []
    for run in runs:
        n = requests // len(runs) + (1 if run["index"] < requests % len(runs) else 0)
        run["requests"] = n
        files = math.ceil(n / REQUESTS_PER_FILE)  # a run given no requests gets no directory
        for f in range(files):
            jobs.append((run["index"], f + 1, min(REQUESTS_PER_FILE, n - f * REQUESTS_PER_FILE)))
    return runs, jobs


_SECONDS_CACHE: dict = {}


def _run_cumulative(seed: int, run_index: int, n_requests: int) -> np.ndarray:
    """Cumulative requests per second of one run: a multinomial draw over the rate curve (exact total)."""
    key = (seed, run_index, n_requests)
    if key not in _SECONDS_CACHE:
        rng = np.random.default_rng([seed, 0x5EC, run_index])
        counts = rng.multinomial(n_requests, rate_curve(seed))
        _SECONDS_CACHE[key] = np.cumsum(counts)
    return _SECONDS_CACHE[key]


def _dict_array(codes: np.ndarray, names: list[str], valid: np.ndarray | None = None) -> pa.DictionaryArray:
    indices = pa.array(codes.astype(np.int32), type=pa.int32(), mask=None if valid is None else ~valid)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names, type=pa.string()))


def build_file(seed: int, run: dict, file_no: int, first_request: int, n: int) -> pa.Table:
    """The spans of requests ``first_request .. first_request + n`` of ``run``, in recorder (end) order."""
    rng = np.random.default_rng([seed, run["index"], file_no])
    cumulative = _run_cumulative(seed, run["index"], run["requests"])
    req = np.arange(first_request, first_request + n, dtype=np.int64)
    second = np.searchsorted(cumulative, req, side="right")
    arrival = np.sort(T0_NS + second * 10**9 + rng.integers(0, 10**9, n))

    # Children, one after another inside the root.
    gap = lambda lo, hi: rng.integers(lo, hi, n)  # noqa: E731  ns between spans
    pre_start = arrival + gap(15_000, 120_000)
    pre_dur = np.rint(rng.lognormal(math.log(3.0 * MS), 0.35, n)).astype(np.int64)
    pre_shape = rng.choice(len(PRE_SHAPES), n, p=[0.80, 0.17, 0.03])
    pre_dur = np.where(pre_shape == 2, pre_dur * 3, pre_dur)  # 4K frames take longer

    big = rng.random(n) < 0.04
    batch = np.where(big, rng.integers(8, 33, n), np.minimum(rng.geometric(0.42, n), 32)).astype(np.int64)
    queue = np.rint(rng.exponential(1.5 * MS, n)).astype(np.int64)
    bb_start = pre_start + pre_dur + queue
    bb_dur = np.rint((4.0 * MS + 1.2 * MS * batch) * rng.lognormal(0.0, 0.10, n)).astype(np.int64)
    bb_shape = rng.choice(len(BACKBONE_SHAPES), n, p=[0.95, 0.04, 0.01])
    flops = batch * BACKBONE_FLOPS_PER_ITEM
    nbytes = BACKBONE_WEIGHT_BYTES + batch * BACKBONE_BYTES_PER_ITEM

    boxes = np.clip(np.rint(rng.lognormal(math.log(300.0), 0.9, n)), 1, MAX_BOXES).astype(np.int64)
    nms_start = bb_start + bb_dur + gap(5_000, 60_000)
    nms_dur = np.rint((0.25 * MS + 400.0 * boxes) * rng.lognormal(0.0, 0.15, n)).astype(np.int64)
    root_end = nms_start + nms_dur + gap(50_000, 400_000)
    root_dur = root_end - arrival

    # Statuses: backbone errors propagate to the root; some clients time out or cancel.
    bb_status = np.where(rng.random(n) < 0.001, 1, 0)
    u = rng.random(n)
    root_status = np.where(bb_status == 1, 1, np.where(u < 0.0003, 2, np.where(u < 0.0005, 3, 0)))

    # Rows: [root, preprocess, backbone, nms] per request, then sorted by end time like a recorder.
    ts = np.stack([arrival, pre_start, bb_start, nms_start], axis=1).ravel()
    dur = np.stack([root_dur, pre_dur, bb_dur, nms_dur], axis=1).ravel()
    order = np.argsort(ts + dur, kind="stable")
    stage = np.tile(np.arange(4, dtype=np.int32), n)
    base = req * SPANS_PER_REQUEST
    span_id = (base[:, None] + np.arange(1, 5)).ravel()
    parent = np.repeat(base + 1, 4)
    is_root = stage == 0
    req_rows = np.repeat(np.arange(n), 4)

    ids = pc.binary_join_element_wise(pa.scalar(run["run_id"]), pc.cast(pa.array(req), pa.string()), "-")
    nan = np.nan
    zeros = np.zeros(n, dtype=np.int64)
    batch_rows = np.stack([zeros, zeros, batch, zeros], axis=1).ravel()
    queue_rows = np.stack([zeros, zeros, queue, zeros], axis=1).ravel()
    flops_rows = np.stack([np.full(n, nan), np.full(n, nan), flops, np.full(n, nan)], axis=1).ravel()
    bytes_rows = np.stack([np.full(n, nan), np.full(n, nan), nbytes, np.full(n, nan)], axis=1).ravel()
    status_rows = np.stack([root_status, zeros, bb_status, zeros], axis=1).ravel()
    # Shapes: a shared dictionary of the fixed ones, then "Nx4" for every box count.
    shape_names = PRE_SHAPES + BACKBONE_SHAPES + [f"{b}x4" for b in range(1, MAX_BOXES + 1)]
    shape_codes = np.stack([zeros, pre_shape, len(PRE_SHAPES) + bb_shape,
                            len(PRE_SHAPES) + len(BACKBONE_SHAPES) + boxes - 1], axis=1).ravel()
    engine_codes = np.tile(np.array([0, 0, 1, 2], dtype=np.int64), n)  # root's is null

    o = order
    backbone = stage[o] == 2
    arrays = [
        pa.array(ts[o], pa.int64()),
        pa.array(dur[o], pa.int64()),
        _dict_array(stage[o], STAGES),
        pa.array(span_id[o], pa.int64()),
        pa.array(parent[o], pa.int64(), mask=is_root[o]),
        ids.take(pa.array(req_rows[o])),
        pa.array(batch_rows[o], pa.int64(), mask=~backbone),
        _dict_array(shape_codes[o], shape_names, valid=~is_root[o]),
        _dict_array(engine_codes[o], ENGINES, valid=~is_root[o]),
        _dict_array(status_rows[o], STATUSES),
        pa.array(queue_rows[o], pa.int64(), mask=~backbone),
        pa.array(flops_rows[o], pa.float64(), mask=~backbone),
        pa.array(bytes_rows[o], pa.float64(), mask=~backbone),
        pa.nulls(len(o), pa.int64()),
        pa.nulls(len(o), pa.int64()),
        pa.nulls(len(o), pa.int64()),
    ]
    return pa.Table.from_arrays(arrays, schema=SPANS)


def run_dir(out: Path, run: dict) -> Path:
    return out / run["host"] / SERVICE / run["run_id"]


def _write_job(args) -> tuple[int, int]:
    out, seed, run, file_no, first_request, n = args
    table = build_file(seed, run, file_no, first_request, n)
    path = run_dir(Path(out), run) / f"spans-{file_no:05d}.parquet"
    tmp = path.with_name(f".{path.name}.tmp")
    with pq.ParquetWriter(tmp, SPANS, **parquet_options(SPANS)) as writer:  # as the recorder writes
        write_row_groups(writer, table, ROW_GROUP)
    tmp.replace(path)
    return run["index"], table.num_rows


def run_json(run: dict, files: int, spans: int) -> dict:
    last_second_end = T0_NS + DURATION_S * 10**9
    return {
        "schema": "run/1.0",
        "loadprobe_version": __version__,
        "host": run["host"],
        "service": SERVICE,
        "run_id": run["run_id"],
        "pid": run["pid"],
        "process_started": run["started_ns"] / 1e9 - 2.5,
        "argv": ["/opt/vision/bin/python", "-m", "vision.serve", "--port", "8080"],
        "started_ns": run["started_ns"],
        "stopped_ns": last_second_end + 3 * 10**9,
        "forked_from": None,
        "tags": {"model": "yolov8n", "deployment": "benchmark"},
        "role": "service",
        "settings": {"sample_devices": False, "sample_interval_s": 1.0, "flush_interval_s": 1.0,
                     "max_buffered_spans": 131072, "rotate_interval_s": 300.0, "rotate_bytes": 268435456},
        "hardware": {
            "cpu": {"model": "AMD EPYC 7B13 64-Core Processor", "arch": "x86_64", "logical_cores": 16,
                    "physical_cores": 8},
            "memory_bytes": 68_719_476_736,
            "gpus": [{"device": "gpu0", "name": "NVIDIA L4", "uuid": f"GPU-{run['host']}-0",
                      "memory_bytes": 24_152_899_584, "power_limit_w": 72.0}],
            "os": "Linux 6.1.0",
            "python": "CPython 3.11.7",
        },
        "samplers": {},
        "counters": {"spans_recorded": spans, "spans_dropped": 0, "spans_written": spans, "samples_written": 0,
                     "samples_dropped": 0, "files": files, "write_errors": 0, "extractor_errors": 0,
                     "invalid_values": 0},
    }


def generate(out, spans: int, seed: int = 1, jobs: int | None = None, quiet: bool = False) -> dict:
    """Write the dataset under ``out``; returns the marker's content."""
    out = Path(out)
    runs, plan_jobs = plan(spans, seed)
    runs = [r for r in runs if r["requests"]]
    for run in runs:
        run_dir(out, run).mkdir(parents=True, exist_ok=True)
    work, firsts = [], {}
    by_index = {r["index"]: r for r in runs}
    for run_index, file_no, n in plan_jobs:
        first = firsts.get(run_index, 0)
        firsts[run_index] = first + n
        work.append((str(out), seed, by_index[run_index], file_no, first, n))
    jobs = jobs or min(2, os.cpu_count() or 1)
    t0 = time.perf_counter()
    written = {r["index"]: 0 for r in runs}
    files = {r["index"]: 0 for r in runs}
    done = 0
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for run_index, rows in pool.map(_write_job, work, chunksize=1):
            written[run_index] += rows
            files[run_index] += 1
            done += 1
            if not quiet:
                print(f"\r{done}/{len(work)} files, {sum(written.values()):,} spans, "
                      f"{time.perf_counter() - t0:.1f} s", end="", file=sys.stderr, flush=True)
    if not quiet:
        print(file=sys.stderr)
    for run in runs:
        info = run_json(run, files[run["index"]], written[run["index"]])
        (run_dir(out, run) / "run.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    marker = {"spans": sum(written.values()), "requested_spans": spans, "seed": seed, "files": len(work),
              "runs": [r["run_id"] for r in runs], "generator_version": 1,
              "seconds": round(time.perf_counter() - t0, 2)}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return marker
