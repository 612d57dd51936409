"""Run the map step over many files: in this process, in a local process pool, or on Dask.

All three call the same ``map_step.map_file`` and ``Partial.merge``; since merging is
exact and order-free, they produce identical portraits.

Usage::

    part = run_map(refs, filters, windows, engine="process", workers=2)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

from .._errors import LoadprobeError
from .memory import keep_freed_memory
from .map_step import Filters, map_file, map_files
from .partials import Partial

ENGINES = ("inprocess", "process", "dask")
MAX_THREADS = 4  # files mapped at once in-process


_SHARED: dict = {}  # a pool process's Filters, sent once (they may hold the load client's request ids)


def _share(filters: Filters) -> None:
    _SHARED["filters"] = filters


def _map_one(job, filters: Filters | None = None) -> Partial:
    """One job ``(ref, filters or None, window)``; None: the ``filters`` given (Dask), or the pool's."""
    ref, given, window = job
    return map_file(ref, given if given is not None else filters if filters is not None else _SHARED["filters"],
                    window)


def _merge_two(a: Partial, b: Partial) -> Partial:
    return a.merge(b)


def run_map(refs, filters: Filters, windows: dict, *, engine: str = "inprocess", workers: int = 1,
            scheduler: str | None = None, progress=None) -> Partial:
    """Map every file and merge the results; ``progress(done, total)`` is called as files finish.
    Local engines run with glibc keeping freed memory for reuse (``_memory.keep_freed_memory``;
    forked workers inherit it): about a tenth less CPU than faulting in fresh pages per file;
    and with numpy's BLAS held to one thread (``_quiet_blas``)."""
    if engine == "dask":
        return _run_map(refs, filters, windows, engine, workers, scheduler, progress)
    with keep_freed_memory(), _quiet_blas():
        return _run_map(refs, filters, windows, engine, workers, scheduler, progress)


@contextlib.contextmanager
def _quiet_blas():
    """One BLAS thread while the map runs. OpenBLAS's worker threads (numpy's BLAS) keep polling
    for work once started, about 3-6% of a core each measured here; the map step never calls
    BLAS, so parking them gives that CPU to the map (about 7% faster at 100M spans). The
    previous limit is restored after (threadpoolctl; without it nothing changes)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; only a broken install lacks it
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _run_map(refs, filters: Filters, windows: dict, engine: str, workers: int, scheduler: str | None,
             progress) -> Partial:
    if engine == "inprocess" or workers <= 1:
        filters = dataclasses.replace(filters, read_threads=True)  # the only process: use every core
    jobs = [(ref, filters, windows.get(ref.run_id)) for ref in refs]
    total = Partial()
    done = 0

    def tick():
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(jobs))

    if engine == "inprocess" or (engine == "process" and workers <= 1):
        # Files are mapped in threads, one per core up to 4 (map_files): decoding and the
        # compiled kernel release the GIL; more threads would mostly queue on the Python parts.
        threads = max(1, min(os.cpu_count() or 1, MAX_THREADS))
        return map_files([(ref, window) for ref, _, window in jobs], filters, threads, on_file=tick)
    if engine == "process":
        from concurrent.futures import ProcessPoolExecutor  # 26 ms to import: only when used

        # The Filters go to each process once, not with every file: the load client's request ids
        # (requestjoin.py) are a few tens of bytes per request.
        light = [(ref, None, window) for ref, _, window in jobs]
        with ProcessPoolExecutor(max_workers=workers, initializer=_share, initargs=(filters,)) as pool:
            for part in pool.map(_map_one, light, chunksize=1):
                total.merge(part)
                tick()
        return total
    if engine == "dask":
        return _run_dask(jobs, filters, workers, scheduler, tick)
    raise LoadprobeError(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")


def _run_dask(jobs, filters: Filters, workers: int, scheduler: str | None, tick) -> Partial:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise LoadprobeError("--engine dask needs dask.distributed: pip install 'loadprobe[dask]'") from None
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    try:
        shared = client.scatter(filters, broadcast=True)  # once per worker, not with every file
        futures = client.map(_map_one, [(ref, None, window) for ref, _, window in jobs], filters=shared, pure=False)
        pending = list(futures)
        # Tree reduction on the cluster: partials never all travel to this process.
        for _ in as_completed(futures):
            tick()
        while len(pending) > 1:
            pairs = [client.submit(_merge_two, pending[i], pending[i + 1], pure=False)
                     for i in range(0, len(pending) - 1, 2)]
            pending = pairs + ([pending[-1]] if len(pending) % 2 else [])
        return pending[0].result() if pending else Partial()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
