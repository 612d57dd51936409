"""The recorder with real files, threads, forks, subprocesses and signals."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import loadprobe
from loadprobe import probe, request
from loadprobe.record.segments import read_stream, recover_run

from ..conftest import record_and_crash, run_python, spans_in


def test_run_directory_layout_run_json_and_schema_tags(tmp_path):
    loadprobe.start(tmp_path, service="vision", tags={"zone": "a"}, flush_interval_s=0.05, sample_interval_s=0.05)

    @probe("stage")
    def stage():
        time.sleep(0.001)

    with request():
        stage()
    time.sleep(0.2)
    stats = loadprobe.stop()
    run_dir = Path(stats.run_dir)
    host, service, run = run_dir.relative_to(tmp_path).parts
    assert service == "vision" and run.startswith(f"{os.getpid()}-")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["schema"] == "run/1.0" and info["pid"] == os.getpid() and info["tags"] == {"zone": "a"}
    assert info["stopped_ns"] >= info["started_ns"]
    assert info["counters"]["spans_written"] == 2 and info["counters"]["spans_dropped"] == 0
    assert info["samplers"]["psutil"]["available"] is True
    assert set(info["samplers"]) == {"psutil", "nvml", "rapl", "interpreter"}
    assert info["hardware"]["cpu"]["logical_cores"] == os.cpu_count()
    spans_file = next(run_dir.glob("spans-*.parquet"))
    assert pq.read_schema(spans_file).metadata[b"loadprobe.schema"] == b"spans/1.1"
    samples = pq.read_table(next(run_dir.glob("samples-*.parquet"))).to_pylist()
    assert {"cpu", "memory", "process"} <= {s["device"] for s in samples}
    assert not list(run_dir.glob(".*"))  # no streams or temporaries left after a clean stop
    assert stats.spans_recorded == stats.spans_written == 2


def test_flush_writes_to_disk_while_recording_and_rotation_splits_files(tmp_path):
    rec = loadprobe.start(tmp_path, service="s", sample_devices=False, flush_interval_s=30, rotate_bytes=20_000)

    @probe("tick")
    def tick(i):
        return i

    for i in range(3000):
        tick(i)
        if i % 500 == 499:
            assert loadprobe.flush()
    assert len(spans_in(rec.run_dir, include_streams=True)) == 3000  # on disk before stop
    loadprobe.stop()
    files = sorted(rec.run_dir.glob("spans-*.parquet"))
    assert len(files) >= 2
    assert sum(pq.read_metadata(f).num_rows for f in files) == 3000


def test_parquet_files_group_rows_by_stage_and_use_the_fast_encodings(tmp_path):
    """Rotation writes every span once, each row group's rows grouped by stage in recorded
    order (schema.write_row_groups), with delta-encoded integers left uncompressed and LZ4 on
    the rest (schema.parquet_options)."""
    rec = loadprobe.start(tmp_path, service="s", sample_devices=False, flush_interval_s=30)

    @probe("inner")
    def inner(i):
        return i

    @probe("outer")
    def outer(i):
        return inner(i)

    for i in range(2000):
        with request(f"r{i}"):
            outer(i)
        if i % 300 == 299:
            loadprobe.flush()  # several stream batches, each with its own dictionary
    loadprobe.stop()
    recorded_order = {}
    (path,) = sorted(rec.run_dir.glob("spans-*.parquet"))
    pf = pq.ParquetFile(path)
    assert pf.metadata.num_rows == 6000
    for g in range(pf.metadata.num_row_groups):
        rows = pf.read_row_group(g, columns=["stage", "span_id"]).to_pylist()
        stages = [r["stage"] for r in rows]
        runs = 1 + sum(a != b for a, b in zip(stages, stages[1:]))
        assert runs == len(set(stages))  # one run per stage
        for r in rows:
            recorded_order.setdefault(r["stage"], []).append(r["span_id"])
    assert sorted(recorded_order) == ["inner", "outer", "request"]
    for ids in recorded_order.values():
        assert ids == sorted(ids) and len(ids) == 2000  # stable: in the order they were written
    column = {pf.metadata.row_group(0).column(i).path_in_schema: pf.metadata.row_group(0).column(i)
              for i in range(pf.metadata.num_columns)}
    assert column["ts_ns"].compression == "UNCOMPRESSED"
    assert column["stage"].compression in ("LZ4", "LZ4_RAW")
    assert "DELTA_BINARY_PACKED" in column["span_id"].encodings
    assert "RLE_DICTIONARY" in column["stage"].encodings


def test_each_row_group_carries_only_the_dictionary_values_it_uses(tmp_path):
    """A row group cut across flushes (or from a table with a fixed vocabulary) keeps, per
    dictionary column, just the values of its own rows: readers decode no unused dictionary."""
    import pyarrow as pa

    from loadprobe.schema import SPANS, parquet_options, write_row_groups

    def spans(shapes, first_id):
        n = len(shapes)
        vocabulary = pa.array([f"{b}x4" for b in range(50)])  # wider than any batch uses
        shape = pa.DictionaryArray.from_arrays(pa.array([None if s is None else int(s) for s in shapes], pa.int32()),
                                               vocabulary)
        columns = {f.name: pa.nulls(n, f.type) for f in SPANS}
        columns.update(ts_ns=pa.array(range(first_id, first_id + n), pa.int64()),
                       span_id=pa.array(range(first_id, first_id + n), pa.int64()),
                       stage=pa.DictionaryArray.from_arrays(pa.array([i % 2 for i in range(n)], pa.int32()),
                                                            pa.array(["pre", "nms", "unused"])),
                       status=pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array(["ok", "error"])),
                       shape=shape)
        return pa.table(columns, schema=SPANS)

    table = pa.concat_tables([spans([3, None, 7, 3, 9, 11], 1), spans([40, 40, None, 2, 2, 5, 6], 100)])
    with pq.ParquetWriter(tmp_path / "spans-00001.parquet", SPANS, **parquet_options(SPANS)) as writer:
        write_row_groups(writer, table, rows=5)
    pf = pq.ParquetFile(tmp_path / "spans-00001.parquet")
    assert pf.metadata.num_row_groups == 3
    written = pf.read()
    assert written.to_pylist() == table.take(_stage_order(table, 5)).to_pylist()
    for g in range(pf.metadata.num_row_groups):
        group = pf.read_row_group(g)
        for name in ("shape", "stage", "status"):
            (chunk,) = group.column(name).chunks
            used = {v for v in chunk.to_pylist() if v is not None}
            assert sorted(chunk.dictionary.to_pylist()) == sorted(used), (g, name)


def _stage_order(table, rows):
    """Row order write_row_groups gives: within each group of ``rows``, stable by stage code."""
    order = []
    codes = table.column("stage").combine_chunks().indices.to_pylist()
    for start in range(0, len(codes), rows):
        group = list(range(start, min(start + rows, len(codes))))
        order += sorted(group, key=lambda i: codes[i])
    return order


def test_start_is_idempotent_and_a_second_directory_is_refused_with_a_warning(tmp_path, caplog):
    first = loadprobe.start(tmp_path / "a", sample_devices=False)
    with caplog.at_level(logging.WARNING, logger="loadprobe"):
        assert loadprobe.start(tmp_path / "b") is first
    assert "already recording" in caplog.text
    loadprobe.stop()
    assert loadprobe.stop() is None


def test_memory_cap_drops_and_counts_without_blocking(tmp_path):
    rec = loadprobe.start(tmp_path, sample_devices=False, max_buffered_spans=1000, flush_interval_s=60)

    @probe("flood")
    def flood():
        pass

    offered = 200_000
    for _ in range(offered):
        flood()
    stats = loadprobe.stop()
    assert stats.spans_dropped == stats.spans_dropped_cap > 0
    assert stats.spans_recorded == offered == stats.spans_written + stats.spans_dropped
    assert stats.spans_lost == stats.spans_pending == 0
    assert stats.spans_written == len(spans_in(rec.run_dir)) >= 1000  # dropped only once the cap was held
    quality = loadprobe.analyze([tmp_path]).data_quality
    assert quality.recorder["spans_dropped_cap"] == stats.spans_dropped_cap and not quality.counters_unknown
    assert any(f"the recorder lost {stats.spans_dropped:,} span(s): {stats.spans_dropped:,} at the memory cap" in w
               for w in quality.warnings)


def test_a_run_without_final_counters_has_unknown_loss_not_zero(tmp_path):
    """A run still recording, or one whose run.json is gone, cannot say what it lost."""

    @probe("step")
    def step():
        pass

    rec = loadprobe.start(tmp_path / "live", sample_devices=False)
    for _ in range(100):
        step()
    loadprobe.flush()
    quality = loadprobe.analyze([tmp_path / "live"]).data_quality  # while it still records
    assert quality.counters_unknown == [str(rec.run_dir)]
    loadprobe.stop()
    assert loadprobe.analyze([tmp_path / "live"]).data_quality.counters_unknown == []
    (rec.run_dir / "run.json").unlink()
    quality = loadprobe.analyze([tmp_path / "live"]).data_quality
    assert quality.counters_unknown == [str(rec.run_dir)]
    assert any("loss is unknown" in w and str(rec.run_dir) in w for w in quality.warnings)


def test_a_run_json_of_a_newer_major_refuses_its_run(tmp_path):
    @probe("step")
    def step():
        pass

    for name in ("old", "new"):
        rec = loadprobe.start(tmp_path / name, sample_devices=False)
        step()
        loadprobe.stop()
    run_json = next((tmp_path / "new").rglob("run.json"))
    info = json.loads(run_json.read_text())
    run_json.write_text(json.dumps({**info, "schema": "run/9.0"}))
    portrait = loadprobe.analyze([tmp_path])
    assert portrait.data_quality.rows == 1  # the old run only
    reasons = {s["path"]: s["reason"] for s in portrait.data_quality.files_skipped}
    assert str(run_json) in reasons and all("upgrade loadprobe" in r for r in reasons.values())
    assert any(path.endswith(".parquet") for path in reasons)  # the run's spans too
    with pytest.raises(loadprobe.LoadprobeError, match=r"no run could be read: .*run\.json.*upgrade loadprobe"):
        loadprobe.analyze([tmp_path / "new"])  # nothing else to read: the reason, not "no data found"


@pytest.mark.parametrize("tag", [None, 7, "", "run/x", "spans"])
def test_a_run_json_with_a_damaged_schema_tag_is_set_aside_not_its_spans(tmp_path, tag):
    """Found by the bad-input harness: a run.json whose schema was null refused its run, and the
    analysis said "no loadprobe data found" beside a good spans file."""
    @probe("step")
    def step():
        pass

    loadprobe.start(tmp_path, sample_devices=False)
    step()
    loadprobe.stop()
    run_json = next(tmp_path.rglob("run.json"))
    run_json.write_text(json.dumps({**json.loads(run_json.read_text()), "schema": tag}))
    portrait = loadprobe.analyze([tmp_path])
    assert portrait.data_quality.rows == 1
    (skipped,) = portrait.data_quality.files_skipped
    assert skipped["path"] == str(run_json) and "is not like 'run/1.0'" in skipped["reason"]


def test_the_cap_is_one_bound_for_the_process_whatever_the_thread_count(tmp_path):
    """Issue #19.4: 100 threads that each recorded a span once, then one burst: nothing is dropped
    while the process holds fewer than max_buffered_spans (per-thread quotas dropped 3,703 of 5,000)."""
    import threading

    @probe("tick")
    def tick():
        pass

    def idle_thread(ready, release):
        tick()  # attaches a buffer that holds a reservation
        ready.release()
        release.wait()

    for cap, burst in ((1 << 17, 5_000), (8_192, 20_000)):
        loadprobe.start(tmp_path / str(cap), sample_devices=False, max_buffered_spans=cap, flush_interval_s=3600)
        ready, release = threading.Semaphore(0), threading.Event()
        threads = [threading.Thread(target=idle_thread, args=(ready, release)) for _ in range(100)]
        for t in threads:
            t.start()
        for _ in threads:
            ready.acquire()
        for _ in range(burst):
            tick()
        release.set()
        for t in threads:
            t.join()
        stats = loadprobe.stop()
        assert stats.spans_recorded == 100 + burst == stats.spans_written + stats.spans_dropped
        if 100 + burst <= cap:
            assert stats.spans_dropped == 0
        else:  # dropped only once the spans held reached the cap: at least a cap's worth is written (more
            # when the flusher's half-cap round drained some during the burst), and every drop is the cap's
            assert stats.spans_written >= cap and stats.spans_dropped == stats.spans_dropped_cap


def test_unwritable_output_leaves_results_untouched_and_warns_once(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the output directory should be")

    @probe("work")
    def work(x):
        return x * 3

    with caplog.at_level(logging.WARNING, logger="loadprobe"):
        loadprobe.start(blocker / "data", sample_devices=False, flush_interval_s=0.02)
        results = [work(i) for i in range(1000)]
        for _ in range(3):
            loadprobe.flush()
        stats = loadprobe.stop()
    assert results == [3 * i for i in range(1000)]
    assert stats.write_errors >= 3 and stats.spans_written == 0
    # Issue #19.3: every span is somewhere in the counters, here all unwritten at stop.
    assert stats.spans_recorded == 1000 == stats.spans_dropped + stats.spans_lost
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(blocker) in warnings[0].getMessage()
    assert blocker.read_text().startswith("a file")  # nothing of the user's was touched


def test_full_disk_is_counted_and_the_host_keeps_running(tmp_path):
    # RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG, as a full disk fails with ENOSPC.
    code = textwrap.dedent(f"""
        import json, resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        import loadprobe
        from loadprobe import probe
        @probe("work", shape=lambda i: (i % 97, 3))
        def work(i):
            return i + 1
        rec = loadprobe.start({str(tmp_path)!r}, sample_devices=False, flush_interval_s=0.02)
        total = 0
        for round in range(20):
            total += sum(work(i) for i in range(5000))
            loadprobe.flush()
        stats = loadprobe.stop()
        print(json.dumps({{"total": total, **stats.as_dict()}}))
    """)
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["total"] == 20 * sum(range(1, 5001))
    assert out["write_errors"] > 0
    assert out["spans_recorded"] == 100_000 == out["spans_written"] + out["spans_dropped"] + out["spans_lost"]
    assert out["spans_dropped"] + out["spans_lost"] > 0
    for path in Path(tmp_path).rglob("spans-*.parquet"):
        pq.read_table(path)  # whatever was finished is complete and readable
    assert done.stderr.count("loadprobe: cannot write") <= 1
    # The full disk still took run.json's final counters (it was written with room to spare),
    # so analysis shows the loss rather than a stale "nothing lost".
    (run_json,) = Path(tmp_path).rglob("run.json")
    on_disk = json.loads(run_json.read_text())
    assert on_disk["stopped_ns"] is not None
    assert {k: on_disk["counters"][k] for k in ("spans_written", "spans_dropped", "spans_lost")} == \
        {k: out[k] for k in ("spans_written", "spans_dropped", "spans_lost")}
    if not out["spans_written"]:  # nothing reached the disk: analysis says why instead of "no data"
        done = subprocess.run([sys.executable, "-m", "loadprobe", "analyze", str(tmp_path), "-o", str(tmp_path / "p")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert f"{out['spans_recorded']:,} span(s) recorded, none written" in done.stderr


def test_environment_variable_starts_recording_without_code_changes(tmp_path):
    code = textwrap.dedent("""
        from loadprobe import probe, request
        @probe("step")
        def step(i):
            return i
        for i in range(10):
            with request():
                step(i)
    """)
    done = run_python(code, env={"LOADPROBE_DIR": str(tmp_path), "LOADPROBE_SERVICE": "envsvc",
                                 "LOADPROBE_TAGS": "build=7", "LOADPROBE_SAMPLE_DEVICES": "0"})
    assert done.returncode == 0, done.stderr
    (run_json,) = tmp_path.glob("*/envsvc/*/run.json")
    info = json.loads(run_json.read_text())
    # Devices are left to a supervisor (LOADPROBE_SAMPLE_DEVICES=0); the process's own interpreter is not.
    assert info["tags"] == {"build": "7"} and set(info["samplers"]) == {"interpreter"}
    assert len(spans_in(run_json.parent)) == 20  # finished at exit, no stop() call needed


def test_forked_workers_write_their_own_files(tmp_path):
    code = textwrap.dedent(f"""
        import os, sys, loadprobe
        from loadprobe import probe
        @probe("work")
        def work(i):
            return i
        loadprobe.start({str(tmp_path)!r}, service="pre", sample_devices=False, flush_interval_s=0.05)
        for i in range(100):
            work(i)            # the parent's spans, some still unflushed at fork time
        children = []
        for w in range(3):
            pid = os.fork()
            if pid == 0:
                for i in range(1000 * (w + 1)):
                    work(i)
                sys.exit(0)    # a worker's normal exit (gunicorn's way): atexit finishes its files
            children.append(pid)
        codes = [os.waitpid(pid, 0)[1] for pid in children]
        for i in range(50):
            work(i)
        loadprobe.stop()
        print(codes)
    """)
    done = run_python(code)
    assert done.returncode == 0 and done.stdout.strip() == "[0, 0, 0]", done.stderr
    counts = {}
    for run_json in tmp_path.glob("*/pre/*/run.json"):
        info = json.loads(run_json.read_text())
        counts[info["pid"]] = (len(spans_in(run_json.parent)), info["forked_from"])
    parent = [n for n, origin in counts.values() if origin is None]
    workers = sorted(n for n, origin in counts.values() if origin is not None)
    assert parent == [150]
    assert workers == [1000, 2000, 3000]


def test_kill_9_leaves_readable_files_and_loses_at_most_one_flush_interval(tmp_path):
    code = textwrap.dedent(f"""
        import sys, time, loadprobe
        from loadprobe import probe
        @probe("beat")
        def beat(i):
            return i
        rec = loadprobe.start({str(tmp_path)!r}, service="crash", sample_devices=False,
                              flush_interval_s=0.1, rotate_bytes=30_000)
        i = 0
        while True:
            for _ in range(200):
                beat(i)
                i += 1
            time.sleep(0.01)
            print(rec.stats().spans_written, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != "LOADPROBE_DIR"})
    written = 0
    for line in proc.stdout:
        written = int(line)
        if written >= 20_000:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    (run_dir,) = tmp_path.glob("*/crash/*")
    for path in run_dir.glob("spans-*.parquet"):
        pq.read_table(path)  # every finished file is complete
    # Left behind: finished Parquet files, the stream being written (plus, if the kill fell
    # inside a rotation, the stream being converted and its hidden .tmp Parquet file).
    assert len(list(run_dir.glob(".spans-*.arrows"))) <= 2
    before = len(spans_in(run_dir, include_streams=True))
    assert before >= written  # everything flushed before the kill is readable
    recover_run(run_dir)
    assert not list(run_dir.glob(".spans-*"))  # streams and temporaries are gone
    after = spans_in(run_dir)
    assert len(after) == before
    assert len({r["span_id"] for r in after}) == len(after)  # nothing duplicated by recovery


def test_a_new_recorder_finishes_files_that_a_crashed_sibling_left(tmp_path):
    record_and_crash(tmp_path, 250)
    (crashed,) = tmp_path.glob("*/svc/*")
    assert list(crashed.glob(".spans-*.arrows")) and not list(crashed.glob("spans-*.parquet"))
    loadprobe.start(tmp_path, service="svc", sample_devices=False)
    deadline = time.monotonic() + 10
    while not list(crashed.glob("spans-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.02)
    loadprobe.stop()
    assert len(spans_in(crashed)) == 500  # 250 requests of 2 spans
    assert not list(crashed.glob(".spans-*"))


def test_streams_are_read_up_to_the_last_complete_batch(tmp_path):
    rec = loadprobe.start(tmp_path, sample_devices=False, flush_interval_s=60)

    @probe("b")
    def b():
        pass

    for _ in range(3):
        for _ in range(100):
            b()
        loadprobe.flush()
    (stream,) = rec.run_dir.glob(".spans-*.arrows")
    data = stream.read_bytes()
    loadprobe.stop()
    cut = tmp_path / "cut" / stream.name
    cut.parent.mkdir()
    cut.write_bytes(data[:-40])  # a crash in the middle of the third batch
    assert read_stream(cut).num_rows == 200


def test_environment_start_keeps_the_spans_of_threads_racing_the_first_probe(tmp_path):
    code = textwrap.dedent("""
        import threading
        from loadprobe import probe, request
        @probe("step")
        def step():
            pass
        gate = threading.Barrier(8)
        def serve():
            gate.wait()
            for _ in range(50):
                with request():
                    step()
        threads = [threading.Thread(target=serve) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
    """)
    done = run_python(code, env={"LOADPROBE_DIR": str(tmp_path), "LOADPROBE_SAMPLE_DEVICES": "0"})
    assert done.returncode == 0, done.stderr
    rows = spans_in(tmp_path)
    assert sum(r["stage"] == "request" for r in rows) == 400 and len(rows) == 800


def test_a_worker_forked_while_the_environment_start_runs_records_its_own_spans(tmp_path):
    code = textwrap.dedent("""
        import os, sys
        from loadprobe import probe
        @probe("work")
        def work(i):
            return i
        work(0)                 # starts recording from LOADPROBE_DIR, in the background
        pid = os.fork()         # at once, while that start is still running
        if pid == 0:
            for i in range(500):
                work(i)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print(status)
    """)
    done = run_python(code, env={"LOADPROBE_DIR": str(tmp_path), "LOADPROBE_SERVICE": "pre",
                                 "LOADPROBE_SAMPLE_DEVICES": "0"}, timeout=25)
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr
    counts = sorted(len(spans_in(p.parent)) for p in tmp_path.glob("*/pre/*/run.json"))
    assert counts[-1] >= 500  # the child's run holds its 500 spans (the parent's holds 1)


def test_a_recorder_stopped_directly_is_not_handed_out_again(tmp_path):
    first = loadprobe.start(tmp_path / "a", sample_devices=False)
    first.stop()
    second = loadprobe.start(tmp_path / "b", sample_devices=False)
    assert second is not first and loadprobe.current() is second
    loadprobe.stop()


def test_a_failed_rotation_neither_loses_nor_duplicates_spans(tmp_path, monkeypatch):
    from loadprobe.record import segments as _segments

    real = _segments.finish_stream
    failures = iter([True, True])

    def flaky(stream):
        if next(failures, False):
            raise OSError(28, "No space left on device")
        return real(stream)

    monkeypatch.setattr(_segments, "finish_stream", flaky)
    rec = loadprobe.start(tmp_path, sample_devices=False, flush_interval_s=60, rotate_bytes=2_000)

    @probe("p")
    def p(i):
        return i

    for round_ in range(5):
        for i in range(200):
            p(i)
        loadprobe.flush()
    stats = loadprobe.stop()
    rows = spans_in(rec.run_dir)
    assert len(rows) == 1000 == stats.spans_written
    assert len({r["span_id"] for r in rows}) == 1000
    assert stats.write_errors >= 1
