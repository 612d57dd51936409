"""A dynamic batcher: gather up to ``max_batch`` requests or until ``window_ms`` passes.

Usage (inside a running event loop)::

    batcher = DynamicBatcher(run_batch, max_batch=8, window_ms=5)
    batcher.start()
    done = await batcher.submit(x)        # x: one input; run_batch gets np.stack of up to 8
    done.output, done.size, done.start_ns, done.end_ns, done.enqueued_ns, done.first

The window opens when the first request of a batch arrives; requests that come while a
batch executes wait for the next one. ``run_batch`` runs on one worker thread (ONNX
Runtime releases the GIL), so the event loop keeps accepting requests meanwhile.
Timestamps are ``perf_counter_ns()`` readings, the clock ``loadprobe.record_span`` takes.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from time import perf_counter_ns

import numpy as np


@dataclass
class Done:
    """One request's share of an executed batch."""

    output: np.ndarray
    size: int  # requests in the batch
    start_ns: int  # the batch started executing
    end_ns: int
    enqueued_ns: int  # this request joined the queue
    first: bool  # the batch's first member (carries the batch's FLOPs in the recording)


class DynamicBatcher:
    def __init__(self, run_batch, *, max_batch: int = 8, window_ms: float = 5.0) -> None:
        if max_batch < 1 or window_ms < 0:
            raise ValueError("max_batch must be >= 1 and window_ms >= 0")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.window_s = window_ms / 1000.0
        self._queue: asyncio.Queue = asyncio.Queue()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="batcher")
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop gathering; requests still waiting get CancelledError."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        while not self._queue.empty():
            _, _, future = self._queue.get_nowait()
            future.cancel()
        self._pool.shutdown(wait=False)  # never block the event loop on a running batch

    async def submit(self, item: np.ndarray) -> Done:
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((item, perf_counter_ns(), future))
        return await future

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.window_s
            while len(batch) < self.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            start = perf_counter_ns()
            try:
                inputs = np.stack([item for item, _, _ in batch])
                outputs = await loop.run_in_executor(self._pool, self.run_batch, inputs)
                end = perf_counter_ns()
                results = [Done(outputs[i], len(batch), start, end, enqueued, i == 0)
                           for i, (_, enqueued, _) in enumerate(batch)]
            except Exception as exc:  # every waiting request gets the failure; the loop goes on
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, _, future), done in zip(batch, results):
                if not future.done():  # its client may have gone away
                    future.set_result(done)
