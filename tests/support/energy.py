"""A GPU that is not here, simulated at the sampler boundary, and a service recording onto it.

``SimulatedGpu`` is a device source with the interface the NVML one has (``availability``,
``inventory``, ``read`` returning ``power_w`` and the energy counter's ``energy_j``), drawing
``IDLE_W`` always and ``ACTIVE_W`` more while any execution runs on it. ``record`` runs a real
recorder with it as the only sampled device and real spans: decode and head on the CPU, the
backbone batched by ``Batcher`` on the GPU (one span per member, as the Router records them).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import loadprobe
from loadprobe.record import samplers

IDLE_W = 40.0
ACTIVE_W = 110.0
BATCH = 4
EXEC_A_S, EXEC_B_S = 0.004, 0.002  # one execution of k items takes A + B*k seconds


class SimulatedGpu:
    """``gpu0`` drawing IDLE_W, plus ACTIVE_W while ``running()`` is held; exact energy, read like NVML."""

    name = "nvml"

    def __init__(self, counter: bool = True, device: str = "gpu0") -> None:
        self.device = device  # "cpu": a host CPU package read like RAPL, whose power loadprobe samples as "cpu"
        self.counter = counter  # False: a board without NVML's total-energy counter (power readings only)
        self._lock = threading.Lock()
        self._running = 0
        self._energy_j = 0.0
        self._at = time.perf_counter()
        self._read = None  # (time, energy) at the last read
        self.active_s = 0.0  # time the device spent running, for the test's own check

    def _advance(self) -> None:
        now = time.perf_counter()
        busy = self._running > 0
        self._energy_j += (IDLE_W + (ACTIVE_W if busy else 0.0)) * (now - self._at)
        self.active_s += (now - self._at) if busy else 0.0
        self._at = now

    def running(self):
        gpu = self

        class _Running:
            def __enter__(self):
                with gpu._lock:
                    gpu._advance()
                    gpu._running += 1

            def __exit__(self, *exc):
                with gpu._lock:
                    gpu._advance()
                    gpu._running -= 1

        return _Running()

    def availability(self) -> dict:
        return {"available": True, "gpus": 1, "simulated": True}

    def inventory(self) -> list[dict]:
        return [] if self.device == "cpu" else [{"device": self.device, "name": "simulated", "uuid": None, "memory_bytes": None, "power_limit_w": None}]

    def read(self) -> list[tuple[str, str, float]]:
        with self._lock:
            self._advance()
            now, energy = self._at, self._energy_j
        last, self._read = self._read, (now, energy)
        if last is None or now <= last[0]:
            return []
        delta = energy - last[1]
        power = [(self.device, "power_w", delta / (now - last[0]))]
        return power + [(self.device, "energy_j", delta)] if self.counter else power

    def close(self) -> None:
        pass


class Batcher:
    """The backbone's dynamic batcher: up to BATCH queued requests per execution on the simulated GPU."""

    def __init__(self, gpu: SimulatedGpu) -> None:
        self.gpu = gpu
        self.queue: queue.Queue = queue.Queue()
        self.items = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def submit(self) -> None:
        done = threading.Event()
        slot: dict = {}
        self.queue.put((done, slot))
        done.wait()
        loadprobe.record_span("backbone", slot["t0"], slot["t1"], batch=slot["k"], engine=self.gpu.device,
                              shape=[slot["k"], 3, 64, 64])

    def _loop(self) -> None:
        while True:
            first = self.queue.get()
            if first is None:
                return
            members = [first]
            deadline = time.perf_counter() + 0.010
            while len(members) < BATCH and time.perf_counter() < deadline:
                try:
                    members.append(self.queue.get(timeout=max(0.0, deadline - time.perf_counter())))
                except queue.Empty:
                    break
            with self.gpu.running():
                t0 = time.perf_counter_ns()
                time.sleep(EXEC_A_S + EXEC_B_S * len(members))
                t1 = time.perf_counter_ns()
            self.items += len(members)
            for done, slot in members:
                slot.update(t0=t0, t1=t1, k=len(members))
                done.set()

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


def record(tmp_path, monkeypatch, phases, counter: bool = True, device: str = "gpu0"):
    """Record requests through decode (CPU) -> backbone (batched, on ``device``) -> head (CPU) over ``phases``:
    (seconds, requests per second) each, 0 for an idle phase. Only ``device`` has its power sampled."""
    gpu = SimulatedGpu(counter, device)
    monkeypatch.setattr(samplers, "default_sources", lambda *a, **k: [gpu])
    recorder = loadprobe.start(tmp_path / "data", service="energy", sample_interval_s=0.1)
    batcher = Batcher(gpu)

    def one_request():
        with loadprobe.request():
            with loadprobe.probe("decode", engine="cpu"):
                time.sleep(0.002)
            batcher.submit()
            with loadprobe.probe("head", engine="cpu"):
                time.sleep(0.001)

    with ThreadPoolExecutor(16) as pool:
        for seconds, rate in phases:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                if rate:
                    pool.submit(one_request)
                    time.sleep(1 / rate)
                else:
                    time.sleep(0.05)
    batcher.close()
    loadprobe.stop()
    return recorder, gpu, batcher
