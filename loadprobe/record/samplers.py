"""Device samplers: CPU, memory, disk and network through psutil, GPUs through NVML, CPU power through RAPL.

Each source says at start whether it can read anything here (``availability``) and from
then on returns ``(device, metric, value)`` readings. Absent hardware or a missing driver
is "unavailable", recorded in run.json, never an error; a metric the device refuses once
is not asked for again.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger("loadprobe")


class PsutilSource:
    """System and process CPU, memory, disk and network, through psutil.

    ``pids``: the processes whose CPU and memory count as "process" (default: this one).
    With ``include_children`` their descendants count too (``loadprobe record`` uses it).
    """

    name = "psutil"

    def __init__(self, pids=None, include_children: bool = False) -> None:
        import psutil

        self._psutil = psutil
        self._procs = [psutil.Process(p) for p in (pids or [os.getpid()])]
        self._include_children = include_children
        self._children: dict[int, object] = {}
        self._last_io: tuple | None = None
        # Our own CPU-time deltas: psutil.cpu_percent(None) keeps module-wide state that the
        # host may be using too, and we must not disturb its readings.
        self._last_cpu = psutil.cpu_times()
        for proc in self._procs:
            proc.cpu_percent(None)

    def availability(self) -> dict:
        return {"available": True, "version": self._psutil.__version__}

    def read(self) -> list[tuple[str, str, float]]:
        ps = self._psutil
        out = self._cpu_readings()
        freq = _safe(ps.cpu_freq)
        if freq:
            out.append(("cpu", "clock_mhz", float(freq.current)))
        mem = ps.virtual_memory()
        out += [("memory", "used_bytes", float(mem.total - mem.available)), ("memory", "util_pct", mem.percent)]
        cpu, rss, threads = 0.0, 0.0, 0
        for proc in self._processes():
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
                    threads += proc.num_threads()
            except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess):
                continue
        out += [("process", "cpu_pct", cpu), ("process", "rss_bytes", rss), ("process", "threads", float(threads))]
        out += self._io_rates()
        return out

    def _cpu_readings(self) -> list[tuple[str, str, float]]:
        """The host CPU's ``util_pct`` and, where the kernel counts it, ``steal_pct`` (``cpu_shares``): steal
        stretches every span timed then, so analysis warns of it."""
        now = self._psutil.cpu_times()
        last, self._last_cpu = self._last_cpu, now
        shares = cpu_shares(last, now)
        if shares is None:
            return [("cpu", "util_pct", 0.0)]
        util, steal = shares
        return [("cpu", "util_pct", util)] + ([("cpu", "steal_pct", steal)] if steal is not None else [])

    def _processes(self):
        procs = list(self._procs)
        if self._include_children:
            seen = set()
            for proc in self._procs:
                try:
                    for child in proc.children(recursive=True):
                        seen.add(child.pid)
                        if child.pid not in self._children:
                            child.cpu_percent(None)  # starts its measurement; counts from the next read
                            self._children[child.pid] = child
                        else:
                            procs.append(self._children[child.pid])
                except self._psutil.NoSuchProcess:
                    continue
            for pid in list(self._children):
                if pid not in seen:
                    del self._children[pid]
        return procs

    def _io_rates(self) -> list[tuple[str, str, float]]:
        disk = _safe(self._psutil.disk_io_counters)
        net = _safe(self._psutil.net_io_counters)
        now = time.monotonic()
        current = (
            now,
            disk.read_bytes if disk else None,
            disk.write_bytes if disk else None,
            net.bytes_recv if net else None,
            net.bytes_sent if net else None,
        )
        previous, self._last_io = self._last_io, current
        if previous is None:
            return []
        elapsed = now - previous[0]
        names = [("disk", "read_bps"), ("disk", "write_bps"), ("net", "rx_bps"), ("net", "tx_bps")]
        return [
            (device, metric, max(0.0, (cur - prev) / elapsed))
            for (device, metric), cur, prev in zip(names, current[1:], previous[1:])
            if cur is not None and prev is not None and elapsed > 0
        ]


class NvmlSource:
    """Per-GPU utilisation, memory, power and energy, temperature, SM clock and throttle reasons, through NVML."""

    name = "nvml"

    _QUERIES = (
        ("util_pct", lambda n, h: n.nvmlDeviceGetUtilizationRates(h).gpu),
        ("mem_util_pct", lambda n, h: n.nvmlDeviceGetUtilizationRates(h).memory),
        ("mem_used_bytes", lambda n, h: n.nvmlDeviceGetMemoryInfo(h).used),
        ("mem_total_bytes", lambda n, h: n.nvmlDeviceGetMemoryInfo(h).total),
        ("power_w", lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ("temp_c", lambda n, h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
        ("clock_mhz", lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
        # Renamed "clocks event reasons" in newer drivers; both return the same bitmask.
        (
            "throttle_reasons",
            lambda n, h: getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)(h)
            if hasattr(n, "nvmlDeviceGetCurrentClocksEventReasons")
            else n.nvmlDeviceGetCurrentClocksThrottleReasons(h),
        ),
    )

    def __init__(self) -> None:
        self._nvml = None
        self._handles: list = []
        self._refused: set[tuple[int, str]] = set()
        self._energy_mj: dict[int, int] = {}  # gpu index -> the energy counter at the last read
        self._reason = ""
        try:
            import pynvml
        except ImportError:
            self._reason = "pynvml not installed (pip install nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            self._reason = f"NVML unavailable: {exc}"
            return
        if not self._handles:
            self._reason = "NVML found no GPU"
            return
        self._nvml = pynvml

    def availability(self) -> dict:
        if self._nvml is None:
            return {"available": False, "reason": self._reason}
        return {"available": True, "gpus": len(self._handles), "driver": _decode(_safe(self._nvml.nvmlSystemGetDriverVersion))}

    def inventory(self) -> list[dict]:
        """Name, memory and power limit of each GPU, for run.json."""
        n = self._nvml
        if n is None:
            return []
        gpus = []
        for i, handle in enumerate(self._handles):
            memory = _safe(lambda: n.nvmlDeviceGetMemoryInfo(handle))
            limit = _safe(lambda: n.nvmlDeviceGetPowerManagementLimit(handle))
            gpus.append(
                {
                    "device": f"gpu{i}",
                    "name": _decode(_safe(lambda: n.nvmlDeviceGetName(handle))),
                    "uuid": _decode(_safe(lambda: n.nvmlDeviceGetUUID(handle))),
                    "memory_bytes": memory.total if memory else None,
                    "power_limit_w": limit / 1000.0 if limit else None,
                }
            )
        return gpus

    def read(self) -> list[tuple[str, str, float]]:
        n = self._nvml
        if n is None:
            return []
        out = []
        for i, handle in enumerate(self._handles):
            for metric, query in self._QUERIES:
                if (i, metric) in self._refused:
                    continue
                try:
                    out.append((f"gpu{i}", metric, float(query(n, handle))))
                except Exception:
                    self._refused.add((i, metric))  # not supported on this board: stop asking
            out += self._energy(i, handle)
        return out

    def _energy(self, i: int, handle) -> list[tuple[str, str, float]]:
        """``energy_j``: joules since the last read, from the board's total-energy counter (Volta and later).

        The counter (mJ since the driver loaded) is exact over any interval, where integrating
        ``power_w`` samples misses what happens between them; analysis prefers it.
        """
        if (i, "energy_j") in self._refused:
            return []
        try:
            total_mj = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception:
            self._refused.add((i, "energy_j"))
            return []
        last = self._energy_mj.get(i)
        self._energy_mj[i] = total_mj
        return [] if last is None or total_mj < last else [(f"gpu{i}", "energy_j", (total_mj - last) / 1000.0)]

    def close(self) -> None:
        if self._nvml is not None:
            _safe(self._nvml.nvmlShutdown)
            self._nvml = None


class RaplSource:
    """CPU package power from the Linux powercap (RAPL) energy counters."""

    name = "rapl"

    def __init__(self, root: str = "/sys/class/powercap") -> None:
        self._zones: list[tuple[Path, int]] = []
        self._last: dict[Path, tuple[float, int]] = {}
        self._reason = ""
        base = Path(root)
        candidates = sorted(base.glob("intel-rapl:[0-9]")) + sorted(base.glob("amd-rapl:[0-9]")) if base.exists() else []
        for zone in candidates:
            energy = zone / "energy_uj"
            try:
                int(energy.read_text())
                wrap = int((zone / "max_energy_range_uj").read_text())
            except (OSError, ValueError) as exc:
                self._reason = f"{energy} not readable: {exc.__class__.__name__}"
                continue
            self._zones.append((energy, wrap))
        if not self._zones and not self._reason:
            self._reason = f"no RAPL package zones under {root}"

    def availability(self) -> dict:
        if not self._zones:
            return {"available": False, "reason": self._reason}
        return {"available": True, "packages": len(self._zones)}

    def read(self) -> list[tuple[str, str, float]]:
        total, joules, complete = 0.0, 0.0, bool(self._zones)
        now = time.monotonic()
        for path, wrap in self._zones:
            try:
                energy = int(path.read_text())
            except (OSError, ValueError):
                complete = False
                continue
            last = self._last.get(path)
            self._last[path] = (now, energy)
            if last is None or now <= last[0]:
                complete = False
                continue
            delta = energy - last[1]
            if delta < 0:  # the counter wrapped
                delta += wrap
            joules += delta / 1e6
            total += delta / 1e6 / (now - last[0])
        # Both: power for the charts, the counter's energy (exact over the interval) for attribution.
        return [("cpu", "power_w", total), ("cpu", "energy_j", joules)] if complete else []


RECORDER_THREADS = ("loadprobe-sampler", "loadprobe-flusher", "loadprobe-signals", "loadprobe-start")
"""The recorder's own threads, by name: not the service's work (the router's ``loadprobe-route`` loop is)."""


class InterpreterSource:
    """The CPU this process's Python threads used: what its interpreter lock lets it do one at a time.

    CPython runs one thread's Python code at a time, so a worker process serves at most as many
    requests per second as one core over the interpreter CPU per request -- however many cores the
    host has. Measured as the process's CPU less its threads that run no Python (BLAS and OpenMP
    pools, often spinning while they wait for work) and loadprobe's own: a Python thread that ended
    between readings still counts. One device per process, ``interpreter:<pid>``, metric
    ``cpu_pct`` (100 = one core), so several worker processes add up rather than average.
    Linux only (per-thread CPU clocks by thread id); unavailable where the lock is off
    (free-threaded builds).
    """

    name = "interpreter"
    _TASKS = "/proc/self/task"

    def __init__(self) -> None:
        self.device = f"interpreter:{os.getpid()}"
        self._reason = None
        if not os.path.isdir(self._TASKS):
            self._reason = f"no {self._TASKS}: per-thread CPU clocks are read on Linux only"
        elif not getattr(sys, "_is_gil_enabled", lambda: True)():
            self._reason = "the interpreter lock is off (free-threaded build): Python threads run in parallel"
        self._others: dict[int, int] = {}  # thread id -> CPU clock (ns) of a thread that is not the service's Python
        self._retired_ns = 0  # what such threads that ended used
        self._last = (time.monotonic_ns(), time.process_time_ns(), 0)
        if self._reason is None:
            self.read()

    def availability(self) -> dict:
        return {"available": False, "reason": self._reason} if self._reason else {"available": True}

    def read(self) -> list[tuple[str, str, float]]:
        now, process = time.monotonic_ns(), time.process_time_ns()
        last_at, last_process, last_others = self._last
        others, native_busy, native_ns = self._other_threads_ns(now - last_at)
        self._last = (now, process, others)
        if now <= last_at:
            return []
        used = (process - last_process) - (others - last_others)
        return [(self.device, "cpu_pct", max(0.0, 100.0 * used / (now - last_at))),
                (self.device, "native_threads", float(native_busy)),
                (self.device, "native_cpu_pct", 100.0 * native_ns / (now - last_at))]

    def _other_threads_ns(self, elapsed_ns: int) -> tuple[int, int, int]:
        """CPU (ns) used so far by the threads that are not the service's Python (native and the recorder's), and of
        the native ones (BLAS, OpenMP, an ONNX Runtime pool) how many were busy over ``elapsed_ns`` and what they
        used then. One that ended keeps its last reading, so what it used stays subtracted."""
        threads = threading.enumerate()
        service = {t.native_id for t in threads if t.name not in RECORDER_THREADS}
        recorder = {t.native_id for t in threads if t.name in RECORDER_THREADS}
        alive = {}
        for tid in map(int, os.listdir(self._TASKS)):
            if tid in service:
                continue
            try:  # Linux's CPU clock of a thread by id: CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD
                alive[tid] = time.clock_gettime_ns((~tid << 3) | 6)
            except OSError:  # it ended meanwhile
                continue
        for tid, ns in self._others.items():
            if alive.get(tid, -1) < ns:  # ended (or its id reused by a new thread): its last reading stays
                self._retired_ns += ns
        native = [ns - self._others.get(tid, 0) for tid, ns in alive.items() if tid not in recorder]
        self._others = alive
        busy = sum(1 for used in native if used >= NATIVE_BUSY_SHARE * elapsed_ns)
        return self._retired_ns + sum(alive.values()), busy, max(0, sum(native))


NATIVE_BUSY_SHARE = 0.05
"""A native thread counts as busy in a reading when it ran for at least this share of it: a BLAS pool's helper
working or spinning, not one that woke once."""


def cpu_shares(last, now) -> tuple[float, float | None] | None:
    """(``util_pct``, ``steal_pct``) of the host's CPU between two ``psutil.cpu_times()`` readings, None when no
    time passed. ``util_pct``: the share not idle (stolen time counts as busy: the guest could not run then
    either); ``steal_pct``: the share the hypervisor gave other guests while this one had work (None where the
    kernel counts none)."""
    total = sum(now) - sum(last)
    if total <= 0:
        return None
    idle = (now.idle + getattr(now, "iowait", 0.0)) - (last.idle + getattr(last, "iowait", 0.0))
    steal = _percent((now.steal - last.steal) / total) if hasattr(now, "steal") else None
    return _percent(1.0 - idle / total), steal


def _percent(share: float) -> float:
    return max(0.0, min(100.0, 100.0 * share))


def _safe(call):
    try:
        return call()
    except Exception:
        return None


def _decode(value):
    return value.decode() if isinstance(value, bytes) else value


def default_sources(pids=None, include_children: bool = False) -> list:
    """Every source this machine has a chance of supporting; each reports its own availability."""
    sources = []
    try:
        sources.append(PsutilSource(pids, include_children))
    except Exception as exc:  # psutil missing or refusing: recorded, never fatal
        log.warning("loadprobe: psutil sampler unavailable: %s", exc)
    sources.append(NvmlSource())
    sources.append(RaplSource())
    return sources


class Sampler(threading.Thread):
    """Reads every available source each ``interval_s`` into ``rows`` until stopped.

    The flusher drains ``rows``; if it falls behind, samples past ``max_rows`` are
    dropped and counted rather than growing memory.
    """

    def __init__(self, sources: list, interval_s: float, max_rows: int = 200_000) -> None:
        super().__init__(name="loadprobe-sampler", daemon=True)
        self.sources = sources
        self.interval_s = interval_s
        self.max_rows = max_rows
        self.rows: list[tuple] = []
        self.dropped = 0
        self.errors = 0
        self._stop_event = threading.Event()

    def availability(self) -> dict:
        return {s.name: s.availability() for s in self.sources}

    def run(self) -> None:
        live = [s for s in self.sources if s.availability().get("available")]
        # Sources whose figures are differences between readings (a scraped page's counters) read at
        # the start and once more at the stop, so the recording covers the whole run.
        edges = [s for s in live if getattr(s, "reads_at_edges", False)]
        if edges:
            self.sample_once(edges)
        next_at = time.monotonic() + self.interval_s
        # Rates and utilisation need an interval to measure over: the first reading comes
        # one interval after start, and one more when stopped, so short runs get two.
        while not self._stop_event.wait(max(0.0, next_at - time.monotonic())):
            self.sample_once(live)
            next_at += self.interval_s
            if next_at < time.monotonic():  # fell behind (suspended, overloaded): skip, don't burst
                next_at = time.monotonic() + self.interval_s
        for source in edges:
            source.force_next()
        self.sample_once(live)
        for source in self.sources:
            if hasattr(source, "close"):
                source.close()

    def sample_once(self, sources=None) -> None:
        now = time.time_ns()
        for source in sources if sources is not None else self.sources:
            try:
                readings = source.read()
            except Exception as exc:
                self.errors += 1
                if self.errors == 1:
                    log.warning("loadprobe: %s sampler failed once (%s); it keeps trying", source.name, exc)
                continue
            room = self.max_rows - len(self.rows)
            if len(readings) > room:
                self.dropped += len(readings) - max(room, 0)
                readings = readings[: max(room, 0)]
            self.rows += [(now, device, metric, float(value)) for device, metric, value in readings]

    def drain(self) -> list[tuple]:
        rows = self.rows
        n = len(rows)
        taken = rows[:n]
        del rows[:n]
        return taken

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)
