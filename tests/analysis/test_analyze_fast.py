"""The C kernel (``loadprobe/analysis/_mapkernel.c`` through ``ckernel.py``) against the numpy reference kernel.

Both must give identical partials (every count, sum, histogram bucket and float, in the same
key order) and so identical portraits, on data that exercises every branch: nested spans,
children whose parent is in another file, duplicate and sparse span ids, errors, timeouts,
null and negative durations, clamped values, batches, shapes, engines, FLOPs and bytes with
NaNs, queue times, tokens, several hosts, time filters and run windows. Also: the footer
check that lets analysis skip decoding request ids when no two hosts can share one.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import loadprobe
from loadprobe._errors import LoadprobeError
from loadprobe.analysis import columns, footers, kernel_c, kernel_numpy, kernels, map_step
from loadprobe.analysis.dataset import discover, file_refs
from loadprobe.analysis.finalize import build_portrait
from loadprobe.analysis.histogram import HIGHEST_TRACKABLE, Histogram
from loadprobe.analysis.kernel_numpy import Grouped
from loadprobe.analysis.map_step import Filters, map_file
from loadprobe.analysis.partials import Partial, merge
from loadprobe.analysis.reading import read_data_file
from loadprobe.analysis.run import _roofline_device
from loadprobe.schema import SPANS

from ..conftest import REPO
from ..support.synthetic_spans import generate as generate_spans

pytestmark = pytest.mark.skipif(not kernels.kernel_available(), reason="the C map kernel was not built here")

BASE_NS = 1_796_198_400 * 10**9
STATUSES = ["ok", "error", "timeout", "cancelled"]


def _dict_array(values: list) -> pa.Array:
    return pa.array(values, pa.string()).dictionary_encode().cast(pa.dictionary(pa.int32(), pa.string()))


def random_spans(rng: np.random.Generator, n_requests: int, run: str, first_id: int, *, id_scale: int = 1,
                 tokens: bool = False, duplicates: bool = False, foreign_parents: bool = False,
                 odd_values: bool = True, shared_ids: str | None = None) -> pa.Table:
    """Requests of a root, pre, model (with nested kernel spans) and post; plus background spans."""
    rows: dict = {f.name: [] for f in SPANS}
    next_id = first_id

    def add(ts, dur, stage, parent, rid, status="ok", **extra):
        nonlocal next_id
        next_id += 1
        span_id = next_id * id_scale
        values = {"ts_ns": int(ts), "dur_ns": dur, "stage": stage, "span_id": span_id, "parent_id": parent,
                  "request_id": rid, "status": status, **extra}
        for name in rows:
            rows[name].append(values.get(name))
        return span_id

    t = BASE_NS + int(rng.integers(0, 10**9))
    for n in range(n_requests):
        t += int(rng.exponential(4e6)) + 1
        rid = f"{shared_ids or run}-{n}"
        status = STATUSES[int(rng.choice(4, p=[0.9, 0.05, 0.03, 0.02]))]
        root_dur = int(rng.integers(5_000_000, 60_000_000))
        if odd_values and n % 97 == 5:
            root_dur = None  # imported arrival-only span
        root = add(t, root_dur, "request", None, rid, status)
        pre = int(rng.lognormal(14, 0.5))
        add(t + 10_000, pre, "pre", root, rid, engine="cpu", shape=f"{int(rng.integers(1, 4)) * 360}x640x3")
        batch = int(rng.integers(1, 9))
        model_status = "error" if status == "error" and rng.random() < 0.5 else "ok"
        flops = float(batch * 2e9)
        if odd_values and n % 31 == 7:
            flops = float("nan")  # a recorded NaN, not a null
        model = add(t + 20_000 + pre, int(1_000_000 * batch + rng.integers(0, 500_000)), "model", root, rid,
                    model_status, engine="npu", batch=batch if n % 13 else None, shape=f"{batch}x3x224x224",
                    queue_ns=int(rng.exponential(1e6)) if n % 11 else -5, flops=flops if n % 17 else None,
                    bytes=float(1e7 + batch * 3e6))
        for k in range(int(rng.integers(0, 3))):  # nested: kernels inside the model span
            add(t + 30_000 + pre + k * 1000, int(rng.integers(10_000, 400_000)), "kernel", model, rid, engine="npu")
        post_dur = int(rng.integers(100_000, 3_000_000))
        if odd_values and n % 211 == 3:
            post_dur = HIGHEST_TRACKABLE + 12_345  # clamped in the histogram, exact in the sums
        extra = {"tokens_in": int(rng.integers(1, 4000)), "tokens_out": int(rng.integers(0, 800))} if tokens else {}
        add(t + 40_000 + pre, post_dur, "post", root, rid, engine="gpu0", shape=f"{int(rng.integers(1, 300))}x4",
            **extra)
        if foreign_parents and n % 7 == 0:
            add(t + 50_000, 200_000, "post", 10**15 + n, rid)  # its parent lives in another file
        if n % 29 == 0:
            add(t - 500_000, int(rng.integers(1_000, 50_000)), "background", None, None, engine="cpu")
    if duplicates:
        for name in rows:  # the same span twice: the first row is the parent children join to
            rows[name].extend(rows[name][:40])
    order = np.argsort([ts + (d or 0) for ts, d in zip(rows["ts_ns"], rows["dur_ns"])], kind="stable")
    arrays = []
    for f in SPANS:
        values = [rows[f.name][i] for i in order]
        arrays.append(_dict_array(values) if pa.types.is_dictionary(f.type) else pa.array(values, f.type))
    return pa.Table.from_arrays(arrays, schema=SPANS)


def write_run(base: Path, host: str, run: str, tables: list, *, window: tuple | None = None,
              row_group_size: int = 700) -> None:
    d = base / host / "svc" / run
    d.mkdir(parents=True)
    for i, table in enumerate(tables, 1):
        pq.write_table(table, d / f"spans-{i:05d}.parquet", row_group_size=row_group_size)
    info = {"schema": "run/1.0", "host": host, "service": "svc", "run_id": run, "role": "service"}
    if window:
        info["started_ns"], info["stopped_ns"] = window
    (d / "run.json").write_text(json.dumps(info))


@pytest.fixture(scope="module")
def varied(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("varied")
    rng = np.random.default_rng(7)
    write_run(base, "h1", "1-a", [random_spans(rng, 400, "1-a", 0), random_spans(rng, 300, "1-a", 5_000,
                                                                                  foreign_parents=True)])
    write_run(base, "h1", "2-b", [random_spans(rng, 350, "2-b", 0, duplicates=True)],
              window=(BASE_NS + 2 * 10**9, BASE_NS + 3 * 10**9))  # many spans outside its own window
    write_run(base, "h2", "3-c", [random_spans(rng, 300, "3-c", 0, id_scale=10**6),  # sparse ids: sort join
                                  random_spans(rng, 200, "3-c", 9_000, tokens=True)])
    write_run(base, "h3", "4-d", [random_spans(rng, 250, "4-d", 0, odd_values=False)], row_group_size=100_000)
    return base


def _norm(value):
    if isinstance(value, Histogram):
        nz = np.flatnonzero(value.counts)
        return ("hist", nz.tolist(), value.counts[nz].tolist(), value.total, value.sum, value.min, value.max,
                value.clamped)
    if dataclasses.is_dataclass(value):
        return {f.name: _norm(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):  # key order too: it decides the order of equal-ranked items downstream
        return [(repr(k), _norm(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, float) and value != value:
        return "nan"
    return value


def _comparable(portrait) -> dict:
    data = portrait.to_dict()
    data.pop("generated_at")
    return data


def _map_both(ref, **filters):
    slow = map_file(ref, Filters(kernel="numpy", **filters))
    fast = map_file(ref, Filters(kernel="c", **filters))
    return slow, fast


@pytest.mark.parametrize("sample_skew", [True, False])
def test_every_file_maps_to_the_same_partial(varied, sample_skew):
    runs, _ = discover([varied])
    windows = {r.run_id: (r.info["started_ns"], r.info["stopped_ns"]) for r in runs if "started_ns" in r.info}
    for ref in file_refs(runs):
        slow = map_file(ref, Filters(kernel="numpy", sample_skew=sample_skew), windows.get(ref.run_id))
        fast = map_file(ref, Filters(kernel="c", sample_skew=sample_skew), windows.get(ref.run_id))
        assert slow.rows > 0 and not slow.skipped
        assert _norm(fast) == _norm(slow), ref.path


def test_the_data_exercises_every_branch(varied):
    runs, _ = discover([varied])
    windows = {r.run_id: (r.info["started_ns"], r.info["stopped_ns"]) for r in runs if "started_ns" in r.info}
    part = merge(map_file(r, Filters(kernel="c"), windows.get(r.run_id)) for r in file_refs(runs))
    assert part.null_durations and part.unjoined_children and part.out_of_window
    assert {"request", "pre", "model", "kernel", "post", "background"} <= set(part.stages)
    model, post = part.stage("model"), part.stage("post")
    assert model.queue.total and model.batch and model.fit and model.flops and model.bytes and model.offset_n
    assert post.latency.clamped and post.tokens_in.total and post.tokens_out.total and len(post.shapes) > 100
    assert model.statuses["error"] and part.request_statuses["timeout"] and part.request_statuses["cancelled"]
    assert part.stage("kernel").count and part.stage("model").self_ns < part.stage("model").latency.sum
    assert part.stage("background").count and part.root_arrivals != part.arrivals


def test_time_filters_give_the_same_partials(varied):
    runs, _ = discover([varied])
    for ref in file_refs(runs):
        whole = map_file(ref, Filters(kernel="numpy"))
        middle = (whole.first_ns + whole.last_ns) // 2
        slow, fast = _map_both(ref, since_ns=whole.first_ns + 10**8, until_ns=middle)
        assert slow.rows_filtered > 0
        assert _norm(fast) == _norm(slow)


def test_portraits_are_identical_whatever_the_kernel_and_engine(varied):
    numpy_path = _comparable(loadprobe.analyze([varied], kernel="numpy"))
    assert numpy_path["data_quality"]["clock_warnings"]  # the run whose spans fall outside its window
    assert _comparable(loadprobe.analyze([varied], kernel="c")) == numpy_path
    assert _comparable(loadprobe.analyze([varied], kernel="c", engine="process", workers=2)) == numpy_path
    since = BASE_NS + 15 * 10**8  # within the requests: the filter cuts some, not all
    filtered = _comparable(loadprobe.analyze([varied], kernel="numpy", since=since / 1e9, host="h[12]"))
    assert filtered["data_quality"]["rows_filtered"] > 0 and filtered["stages"]
    assert _comparable(loadprobe.analyze([varied], kernel="c", since=since / 1e9, host="h[12]")) == filtered
    for kernel in ("numpy", "c"):  # past every span: an error naming the window, whatever the kernel
        with pytest.raises(LoadprobeError, match="no span lies within --since"):
            loadprobe.analyze([varied], kernel=kernel, since=(BASE_NS + 10 * 10**9) / 1e9)


def test_the_numpy_path_is_taken_when_per_file_tables_would_be_too_large(varied, monkeypatch):
    runs, _ = discover([varied])
    refs = file_refs(runs)
    reference = [_norm(map_file(r, Filters(kernel="numpy"))) for r in refs]
    calls = []
    original = kernel_numpy.aggregate
    monkeypatch.setattr(kernel_numpy, "aggregate", lambda *a: calls.append(1) or original(*a))
    monkeypatch.setattr(kernel_c, "_DENSE_CELLS", 10)
    assert [_norm(map_file(r, Filters(kernel="c"))) for r in refs] == reference
    assert len(calls) == len(refs)
    monkeypatch.setattr(kernel_c, "_DENSE_CELLS", 1 << 23)
    monkeypatch.setattr(kernel_c, "_DENSE_IDS", 0)  # the sort join everywhere
    calls.clear()
    assert [_norm(map_file(r, Filters(kernel="c"))) for r in refs] == reference
    assert not calls


def test_a_stream_of_many_record_batches_maps_the_same_with_either_kernel(tmp_path):
    # An unfinished segment (.spans-*.arrows) reads as one chunk per flush: the kernel then gets
    # sparse columns (batch, FLOPs, bytes) concatenated, with their validity re-packed.
    rng = np.random.default_rng(11)
    table = random_spans(rng, 300, "1-a", 0, tokens=True)
    d = tmp_path / "h" / "svc" / "1-a"
    d.mkdir(parents=True)
    with pa.ipc.new_stream(d / ".spans-00001.arrows", SPANS) as writer:
        for batch in table.to_batches(max_chunksize=37):
            writer.write_batch(batch)
    (ref,) = file_refs(discover([tmp_path])[0])
    table = read_data_file(ref).table
    assert ref.stream and table.column("flops").num_chunks > 1 and table.column("batch").null_count
    slow, fast = _map_both(ref)
    rows = table.select(["stage", "batch"]).to_pylist()
    batches = Counter(r["batch"] for r in rows if r["stage"] == "model" and r["batch"] is not None)
    assert fast.stage("model").batch == batches and fast.stage("model").flops
    assert _norm(fast) == _norm(slow)


def _expected_counts(table: pa.Table) -> dict:
    """Per stage: its shapes, engines and statuses counted straight from the rows."""
    counts: dict = {}
    for row in table.select(["stage", "shape", "engine", "status"]).to_pylist():
        mine = counts.setdefault(row["stage"], {"shapes": Counter(), "engines": Counter(), "statuses": Counter()})
        for key, column in (("shapes", "shape"), ("engines", "engine"), ("statuses", "status")):
            if row[column] is not None:
                mine[key][row[column]] += 1
    return counts


@pytest.mark.parametrize("layout", ["row groups", "stream batches"])
def test_chunks_with_their_own_dictionaries_give_exact_counts(tmp_path, layout):
    # Each row group (as write_row_groups cuts them) or stream batch has its own dictionary, in
    # its own order: the kernel maps each chunk's indices to the file's names in place.
    from loadprobe.schema import parquet_options, write_row_groups

    rng = np.random.default_rng(5)
    table = random_spans(rng, 400, "1-a", 0)
    d = tmp_path / "h" / "svc" / "1-a"
    d.mkdir(parents=True)
    if layout == "row groups":
        with pq.ParquetWriter(d / "spans-00001.parquet", SPANS, **parquet_options(SPANS)) as writer:
            write_row_groups(writer, table, rows=300)
    else:
        with pa.ipc.new_stream(d / ".spans-00001.arrows", SPANS) as writer:
            for batch in table.to_batches(max_chunksize=250):  # re-encoded: a dictionary per batch
                writer.write_batch(pa.RecordBatch.from_arrays(
                    [_dict_array(col.dictionary_decode().to_pylist()[::-1])
                     .take(pa.array(range(len(col) - 1, -1, -1))) if pa.types.is_dictionary(col.type) else col
                     for col in batch.columns], schema=SPANS))
    (ref,) = file_refs(discover([tmp_path])[0])
    read = read_data_file(ref).table
    dictionaries = [tuple(chunk.dictionary.to_pylist()) for chunk in read.column("shape").chunks]
    assert len(set(dictionaries)) > 1  # the chunks really disagree
    slow, fast = _map_both(ref)
    assert _norm(fast) == _norm(slow)
    expected = _expected_counts(read)
    assert set(fast.stages) == set(expected)
    for name, sp in fast.stages.items():
        assert (sp.shapes, sp.engines, sp.statuses) == (expected[name]["shapes"], expected[name]["engines"],
                                                        expected[name]["statuses"]), name


def test_optional_columns_in_long_null_runs_at_any_bit_offset():
    # Rows grouped by stage leave the optional columns (batch, FLOPs, bytes, queue, tokens) null
    # in long runs, which the kernel skips 64 or 8 rows at a time; tables sliced at every offset
    # of a 64-row word move where runs start and end against those words, and read bitmaps
    # that start mid-byte.
    from loadprobe.analysis.dataset import FileRef

    rng = np.random.default_rng(13)
    table = random_spans(rng, 300, "1-a", 0, tokens=True)
    stages = table.column("stage").combine_chunks().indices.to_numpy()
    table = table.take(np.argsort(stages, kind="stable")).combine_chunks()
    ref = FileRef(path="sliced.parquet", kind="spans", stream=False, host="h", service="svc", run_id="1-a")
    for offset in range(0, 72, 3):
        sliced = table.slice(offset)
        assert sliced.column("queue_ns").chunk(0).offset == offset
        parts = {}
        for kernel in ("numpy", "c"):
            parts[kernel] = Partial()
            map_step.map_spans(parts[kernel], sliced, ref, Filters(kernel=kernel), None)
        model = parts["c"].stage("model")
        rows = [r for r in sliced.select(["stage", "batch", "queue_ns"]).to_pylist() if r["stage"] == "model"]
        assert model.batch == Counter(r["batch"] for r in rows if r["batch"] is not None), offset
        assert model.queue.total == sum(1 for r in rows if r["queue_ns"] is not None and r["queue_ns"] >= 0), offset
        assert _norm(parts["c"]) == _norm(parts["numpy"]), offset


def test_a_recorded_service_gives_identical_portraits(tmp_path):
    from .test_analyze import record_pipeline

    record_pipeline(tmp_path, requests=300)
    a = _comparable(loadprobe.analyze([tmp_path], kernel="numpy"))
    b = _comparable(loadprobe.analyze([tmp_path], kernel="c"))
    assert a == b and a["requests"]["count"] == 300


def test_the_benchmark_dataset_gives_identical_portraits(tmp_path):
    generate_spans(tmp_path, 40_000, seed=3, jobs=1, quiet=True)  # what benchmarks/gen_spans.py writes
    runs, _ = discover([tmp_path])
    assert len({r.host for r in runs}) == 2
    assert not footers.hosts_may_share_request_ids(file_refs(runs))  # "<run>-<n>" ids: each host its own range
    a = _comparable(loadprobe.analyze([tmp_path], kernel="numpy"))
    b = _comparable(loadprobe.analyze([tmp_path], kernel="c"))
    assert a == b and a["requests"]["count"] == 10_000
    # Skipping the ids changes nothing: with them decoded and sampled, the same portrait.
    part = merge(map_file(r, Filters(sample_skew=True)) for r in file_refs(runs))
    assert part.skew
    device = _roofline_device(None, runs, ())
    assert _comparable(build_portrait(part, runs, inputs=[tmp_path], device=device)) == a


def test_request_id_ranges_decide_whether_ids_are_decoded(tmp_path):
    rng = np.random.default_rng(1)
    write_run(tmp_path / "apart", "a", "1-a", [random_spans(rng, 50, "1-a", 0)])
    write_run(tmp_path / "apart", "b", "2-b", [random_spans(rng, 50, "2-b", 0)])
    write_run(tmp_path / "apart", "b", "3-a", [random_spans(rng, 50, "3-a", 0)])  # "3-a-*": still above every "1-a-*"
    assert not footers.hosts_may_share_request_ids(file_refs(discover([tmp_path / "apart"])[0]))
    # A distributed trace: host b's spans carry host a's request ids.
    write_run(tmp_path / "shared", "a", "1-a", [random_spans(rng, 50, "1-a", 0)])
    write_run(tmp_path / "shared", "b", "2-b", [random_spans(rng, 50, "2-b", 0, shared_ids="1-a")])
    assert footers.hosts_may_share_request_ids(file_refs(discover([tmp_path / "shared"])[0]))
    # Interleaved ranges of two hosts overlap even if no id is equal: decoded, to be safe.
    write_run(tmp_path / "mixed", "a", "1-a", [random_spans(rng, 50, "1-a", 0, shared_ids="m")])
    write_run(tmp_path / "mixed", "b", "2-b", [random_spans(rng, 50, "2-b", 0, shared_ids="m-1x")])
    assert footers.hosts_may_share_request_ids(file_refs(discover([tmp_path / "mixed"])[0]))
    # One host: nothing to compare.
    assert not footers.hosts_may_share_request_ids(file_refs(discover([tmp_path / "shared" / "a"])[0]))
    # No statistics in a footer: nothing can be ruled out.
    d = tmp_path / "nostats" / "b" / "svc" / "2-b"
    write_run(tmp_path / "nostats", "a", "1-a", [random_spans(rng, 50, "1-a", 0)])
    d.mkdir(parents=True)
    pq.write_table(random_spans(rng, 50, "2-b", 0), d / "spans-00001.parquet", write_statistics=False)
    assert footers.hosts_may_share_request_ids(file_refs(discover([tmp_path / "nostats"])[0]))


def test_overlap_sweep_matches_a_pairwise_check():
    rng = np.random.default_rng(5)
    for _ in range(300):
        ranges = []
        for _ in range(int(rng.integers(1, 9))):
            lo, hi = sorted(rng.integers(0, 60, 2).tolist())
            ranges.append((f"h{int(rng.integers(0, 3))}", b"%03d" % lo, b"%03d" % hi))
        expected = any(a[0] != b[0] and a[1] <= b[2] and b[1] <= a[2] for a in ranges for b in ranges)
        assert footers.ranges_overlap_across_hosts(list(ranges)) == expected, ranges


def test_kernel_names_are_checked(varied):
    with pytest.raises(LoadprobeError, match="kernel"):
        loadprobe.analyze([varied], kernel="fortran")


def test_the_kernel_is_chosen_once_as_the_filters_are_made():
    # Every file mapped with these Filters, in this process or a worker, uses the kernel named here.
    assert Filters().kernel == Filters(kernel="auto").kernel == Filters(kernel="c").kernel == "c"
    assert Filters(kernel="numpy").kernel == "numpy"
    with pytest.warns(DeprecationWarning, match="kernel 'compiled' is now 'c'"):
        assert Filters(kernel="compiled").kernel == Filters(kernel="c").kernel  # the old name still works
    with pytest.raises(LoadprobeError, match="kernel 'fortran' is not one of auto, c, numpy"):
        Filters(kernel="fortran")
    filters = Filters(since_ns=5, kernel="numpy")
    assert pickle.loads(pickle.dumps(filters)) == filters  # as process and Dask workers receive them
    assert dataclasses.replace(filters, read_threads=True).kernel == "numpy"


def test_c_float_sums_round_exactly_as_numpy_s():
    # Partials must not depend on which path mapped a file: the kernel adds floats in numpy's
    # pairwise order (8 accumulators, blocks of 128, halves beyond), checked at every regime.
    from loadprobe.analysis import ckernel as _mapkernel

    rng = np.random.default_rng(3)
    for n in [0, 1, 2, 8, 9, 16, 17, 129, 130, 136, 137, 257, 1000, 4097, 65_537, 250_001]:
        times = np.cumsum(rng.lognormal(15, 2.5, n).astype(np.int64))
        gaps = np.diff(times) / 1e9
        assert _mapkernel.gap_sums(times) == (float(gaps.sum()), float((gaps * gaps).sum())), n


def test_float_sums_fall_back_to_numpy_when_the_kernel_would_add_otherwise(varied, monkeypatch):
    # Were a numpy ever to sum in another order, the kernel's float sums are not used: partials
    # stay identical to the numpy path's.
    from loadprobe.analysis import ckernel as _mapkernel

    refs = file_refs(discover([varied])[0])
    reference = [_norm(map_file(r, Filters(kernel="numpy"))) for r in refs]
    monkeypatch.setattr(_mapkernel, "FLOAT_SUMS_AS_NUMPY", False)
    monkeypatch.setattr(_mapkernel, "gap_sums", lambda times: pytest.fail("the kernel's gap sums were used"))
    original, seen = kernel_numpy.batch_and_float_sums, []
    monkeypatch.setattr(kernel_numpy, "batch_and_float_sums",
                        lambda part, c, grouped=None: seen.append(grouped) or original(part, c, grouped))
    assert [_norm(map_file(r, Filters(kernel="c"))) for r in refs] == reference
    assert seen and all(isinstance(g, Grouped) for g in seen)  # grouped by the kernel, summed by numpy


def test_c_null_fill_is_an_exact_copy():
    rng = np.random.default_rng(11)
    assert kernels.c_library() is not None
    for _ in range(40):
        n = int(rng.integers(1, 300))
        values = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64, endpoint=True)
        mask = rng.random(n) < rng.choice([0.0, 0.3, 0.9, 1.0])
        array = pa.array(values, pa.int64(), mask=~mask)
        start = int(rng.integers(0, n))
        chunks = [array.slice(0, start), array.slice(start)]  # odd bit offsets
        for fill in (-1, 0, -(2**62)):
            fast = columns.with_fill(chunks, n, fill, np.int64)
            assert fast.tolist() == [v if m else fill for v, m in zip(values.tolist(), mask.tolist())]
        floats = pa.array(rng.normal(size=n), pa.float64(), mask=~mask)
        fast = columns.with_fill([floats.slice(0, start), floats.slice(start)], n, np.nan, np.float64, np.float64)
        expected = [v if m else np.nan for v, m in zip(floats.to_numpy(zero_copy_only=False).tolist(), mask.tolist())]
        np.testing.assert_array_equal(fast, expected)
        codes = pa.array(rng.integers(0, 50, n).astype(np.int32), pa.int32(), mask=~mask)
        fast = columns.with_fill([codes.slice(0, start), codes.slice(start)], n, -1, np.int32, np.int32)
        assert fast.tolist() == [c if m else -1 for c, m in zip(codes.to_numpy(zero_copy_only=False).tolist(),
                                                               mask.tolist())]


def test_without_the_c_kernel_the_numpy_path_gives_the_same_portrait(varied):
    import subprocess

    code = ("import importlib.util, json, sys\n"  # as if the C kernel had not been built
            "find = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'loadprobe.analysis._cmapkernel' else find(name, *a)\n"
            "import loadprobe\n"
            f"p = loadprobe.analyze([{str(varied)!r}])\n"
            "d = p.to_dict(); d.pop('generated_at'); print(json.dumps(d))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == json.loads(json.dumps(_comparable(loadprobe.analyze([varied], kernel="c"))))
    failed = subprocess.run([sys.executable, "-c", code.replace("analyze([", "analyze(kernel='c', paths=[")],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert failed.returncode != 0 and "kernel 'c' needs loadprobe's C kernel" in failed.stderr


def test_auto_uses_the_c_kernel_whatever_the_size(varied, monkeypatch):
    compiled = []
    original = kernel_c.aggregate
    monkeypatch.setattr(kernel_c, "aggregate", lambda *a: compiled.append(1) or original(*a))
    assert _comparable(loadprobe.analyze([varied])) == _comparable(loadprobe.analyze([varied], kernel="numpy"))
    assert compiled


def test_analysis_never_imports_pandas(varied):
    import subprocess

    code = ("import sys, loadprobe\n"
            f"loadprobe.analyze([{str(varied)!r}])\n"
            f"loadprobe.analyze([{str(varied)!r}], kernel='numpy')\n"
            "print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"  # pyarrow's to_numpy would import it: ~0.3 s per process


def test_a_thread_s_reused_join_table_never_joins_to_another_file(tmp_path):
    """The compiled join keeps its id table from file to file without clearing it: a parent id
    that only an earlier file had must stay unjoined in the next one, as the numpy path says."""
    def table(ids: list, parents: list) -> pa.Table:
        n = len(ids)
        columns = {"ts_ns": [BASE_NS + i * 1000 for i in range(n)], "dur_ns": [500] * n,
                   "stage": ["root" if p is None else "child" for p in parents], "span_id": ids,
                   "parent_id": parents, "request_id": [f"r{i}" for i in range(n)], "status": ["ok"] * n}
        return pa.Table.from_arrays([_dict_array(columns[f.name]) if pa.types.is_dictionary(f.type) and f.name in columns
                                     else pa.array(columns.get(f.name, [None] * n), f.type) for f in SPANS],
                                    schema=SPANS)

    first = table(list(range(1, 201)), [None if i % 2 else i - 1 for i in range(1, 201)])  # even ids: children
    # The second file has only odd ids; its children name even ids, which only the first file had.
    second = table(list(range(1, 201, 2)), [None if i % 4 == 1 else i - 1 for i in range(1, 201, 2)])
    write_run(tmp_path, "h1", "1-a", [first, second])
    refs = file_refs(discover([tmp_path])[0])
    for kernel in ("numpy", "c", "c"):  # twice: the second pass starts with a used table
        parts = [map_file(ref, Filters(kernel=kernel)) for ref in refs]
        assert parts[1].unjoined_children == 50
        if kernel == "numpy":
            reference = [_norm(p) for p in parts]
        assert [_norm(p) for p in parts] == reference
