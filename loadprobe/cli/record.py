"""``loadprobe record``: run any command with recording switched on, and sample devices meanwhile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from ..record import env as _env
from .._errors import LoadprobeError
from ._types import Seconds

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", default="loadprobe-data", show_default=True,
              type=click.Path(file_okay=False), help="Directory the command's probes and the device samples record into.")
@click.option("--service", help="Service name (default: the command's script or program name).")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Tag stored in run.json; repeatable.")
@click.option("--sample-interval", default=0.5, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds between device samples.")
@click.option("--no-devices", is_flag=True, help="Record spans only; do not sample devices.")
@click.option("--otlp", metavar="HOST:PORT",
              help="Also receive OpenTelemetry traces over OTLP/HTTP there (e.g. 127.0.0.1:4318) and record them; "
                   "with no COMMAND, receive until Ctrl-C or SIGTERM.")
@click.option("--attr", "attributes", multiple=True, metavar="FIELD=KEY",
              help="With --otlp: read FIELD (batch, engine, tokens_in, ...) from the span attribute KEY (repeatable).")
@click.option("--scrape", "scrape", multiple=True, metavar="URL[,URL...]",
              help="Sample these Prometheus endpoints (an engine's /metrics) into the recording: gauges as they are, "
                   "counters as rates, histograms as per-interval quantiles.")
@click.option("--every", "scrape_every", default="1s", show_default=True, type=Seconds(minimum=0.05),
              help="Seconds between scrapes of --scrape.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def record(output, service, tags, sample_interval, no_devices, otlp, attributes, scrape, scrape_every, command):
    """Run COMMAND so that its probes record into OUTPUT, sampling devices for its lifetime; with
    --otlp, also record the OpenTelemetry traces an engine's exporter sends.

    \b
    Examples:
        loadprobe record --output data/ -- python serve.py --port 8000
        loadprobe record --otlp 127.0.0.1:4318 --output data/
        loadprobe record --otlp 127.0.0.1:4318 --output data/ -- python -m vllm.entrypoints.openai.api_server \\
            --otlp-traces-endpoint http://127.0.0.1:4318/v1/traces ...

    Signals sent to loadprobe (Ctrl-C, SIGTERM) are passed on to the command, and
    loadprobe exits with the command's exit status.
    """
    if not command and not otlp:
        raise LoadprobeError("record: no command given; usage: loadprobe record --output DIR -- python serve.py "
                             "(or --otlp HOST:PORT to receive OpenTelemetry traces)")
    if attributes and not otlp:
        raise LoadprobeError("record: --attr maps OpenTelemetry span attributes; it needs --otlp HOST:PORT")
    for tag in tags:
        if "=" not in tag:
            raise LoadprobeError(f"record: --tag {tag!r} is not KEY=VALUE; e.g. --tag build=142")
    out = Path(output).resolve()
    from ..record.scrape import sources as scrape_sources

    sources = scrape_sources(scrape, scrape_every)
    if not command and sources and not service:
        raise LoadprobeError("record: --scrape with --otlp and no command needs --service NAME: the scraped metrics "
                             "and the received spans are recorded as that one service")
    # A service named with --service takes every received span, whatever its SDK calls itself: the user asked for one.
    receiver = _receiver(out, otlp, attributes, service) if otlp else None
    if not command:
        _receive_until_stopped(receiver, out, service, tags, sample_interval, no_devices, sources)
        return
    started = time.time_ns()
    try:
        code = _supervise(out, command, service, tags, sample_interval, no_devices,
                          receiver.endpoint if receiver is not None else None, sources)
    finally:
        if receiver is not None:
            receiver.stop()
    recovered = recover_finished_runs(out)
    click.echo(summary(out, started, recovered, received=receiver is not None), err=True)
    if receiver is not None:
        click.echo(_received(receiver, out, sampled_as=service or service_name(command)), err=True)
    sys.exit(code)


def _receiver(out: Path, address: str, attributes, service: str | None):
    from ..record.receiver import Receiver

    receiver = Receiver(out, address, attributes=attributes, service=service).start()
    click.echo(f"loadprobe: receiving OpenTelemetry traces at {receiver.endpoint} -> {out}", err=True)
    return receiver


def _receive_until_stopped(receiver, out: Path, service, tags, sample_interval, no_devices, sources) -> None:
    """Receive until SIGINT or SIGTERM, then write everything and say what was received. With
    ``service`` (which the received spans are put under), devices and ``sources`` are sampled too."""
    import threading

    stopped = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopped.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    sampler = _sampler(out, service, tags, sample_interval, no_devices, sources, pids=None) if service else None
    try:
        while not stopped.wait(0.5):
            pass
    finally:
        receiver.stop()
        if sampler is not None:
            sampler.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo(_received(receiver, out), err=True)


def _received(receiver, out: Path, sampled_as: str | None = None) -> str:
    """What the receiver took: spans, exports, services; a warning line for what it refused or lost, and for spans
    that came under another service than the one the devices were sampled as (``sampled_as``)."""
    from ..record.rundir import safe_name

    counters = receiver.counters()
    services = sorted({run.service for run in receiver.runs.values()})
    line = (f"loadprobe: received {counters['spans_received']:,} spans ({counters['exports']:,} exports) from "
            f"{len(services)} service(s){' (' + ', '.join(services) + ')' if services else ''} -> {out}")
    trouble = [f"{counters[key]:,} {what}" for key, what in (
        ("spans_refused", "spans refused while the writer was behind (senders retry them)"),
        ("bad_requests", "bad requests (see the receiver's answers)"),
        ("spans_lost", "spans lost (no run folder could be made)")) if counters[key]]
    if trouble:
        line += "\nloadprobe: warning: " + ", ".join(trouble)
    sampled = safe_name(sampled_as) if sampled_as is not None else None
    if sampled is not None and services and sampled not in services and any(out.glob(f"*/{sampled}/*")):
        line += (f"\nloadprobe: warning: the spans came as service {', '.join(map(repr, services))} (the service.name "
                 f"their OpenTelemetry SDK set), the device samples as {sampled!r}: analyze reads them as "
                 f"{len(services) + 1} services; record again with --service {services[0]} to file both as one")
    if not counters["exports"]:
        line += ("\nloadprobe: nothing was received: is the exporter pointed at "
                 f"{receiver.endpoint} (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with http/protobuf)?")
    return line


def _sampler(out: Path, service: str, tags, sample_interval, no_devices, sources, pids):
    """The supervisor's recorder: devices (unless ``no_devices``) and ``sources`` sampled, no spans; None if nothing to sample."""
    if no_devices and not sources:
        return None
    from ..record.recorder import Recorder

    interval = min([sample_interval] + [source.interval_s for source in sources])
    return Recorder(out, service=service, tags=_env.parse_tags(",".join(tags)), sample_interval_s=interval,
                    sample_devices=not no_devices, record_spans=False, sampler_pids=pids,
                    more_sources=sources).start()


def _supervise(out: Path, command, service, tags, sample_interval, no_devices, otlp_endpoint=None,
               sources=()) -> int:
    """Run ``command`` recording into ``out``, sampling devices meanwhile; its exit code.

    With ``otlp_endpoint`` (the receiver's), the command's OpenTelemetry SDK is pointed there and
    names its spans' service as the recording does, unless its environment says otherwise, so that
    its received spans and the device samples are one service."""
    service = service or service_name(command)
    env = dict(os.environ)
    if otlp_endpoint:
        env.setdefault("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", otlp_endpoint)
        env.setdefault("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        env.setdefault("OTEL_SERVICE_NAME", service)
    env[_env.LOADPROBE_DIR] = str(out)
    env[_env.LOADPROBE_SERVICE] = service
    env[_env.LOADPROBE_SAMPLE_DEVICES] = "0"  # the supervisor samples for the whole process tree
    if tags:
        env[_env.LOADPROBE_TAGS] = ",".join(tags)
    try:
        child = subprocess.Popen(list(command), env=env, **_own_process_group())
    except FileNotFoundError:
        raise LoadprobeError(f"record: command not found: {command[0]!r}; check the name or give its full path") from None
    except PermissionError:
        raise LoadprobeError(f"record: {command[0]!r} is not executable; check its permissions") from None

    previous = {sig: signal.signal(sig, lambda signum, _frame: _forward(child, signum)) for sig in _FORWARDED}
    supervisor = None
    try:
        supervisor = _sampler(out, service, tags, sample_interval, no_devices, list(sources), pids=[child.pid])
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:
            child.kill()
            child.wait()
        if supervisor is not None:
            supervisor.stop()
    return 128 - code if code < 0 else code


def _own_process_group() -> dict:
    """Popen's arguments that start the command in a process group of its own and, on Linux, have the kernel send
    it a SIGTERM should this supervisor die without forwarding one (``kill -9``): a service left running after its
    recording ended would hold its port and keep using the host unrecorded. The kernel sends it when the thread
    that started the command ends, so ``_supervise`` starts it from the thread that waits for it; it reaches the
    command itself (not what a wrapper script started), and not a set-user-ID one such as sudo."""
    # In its own group, a Ctrl-C at the terminal reaches the command once, through us,
    # instead of twice (from the terminal and from our forwarding).
    if sys.platform.startswith("linux"):
        return {"preexec_fn": _parent_death_signal(os.getpid())}
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # pragma: no cover - Python 3.10


_PR_SET_PDEATHSIG = 1  # prctl(2)


def _parent_death_signal(parent: int):
    """What the forked child runs before the command (Linux): its own process group, a SIGTERM when its parent
    dies, and an exit at once if it already has (between fork and prctl). prctl is found and typed here, in the
    parent, so that the child -- forked while other threads may hold locks -- only calls it."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    term = int(signal.SIGTERM)

    def setup() -> None:
        os.setpgrp()
        prctl(_PR_SET_PDEATHSIG, term, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + term)  # a signal could meet a handler copied from us; the command must not start

    return setup


def _forward(child: subprocess.Popen, signum: int) -> None:
    if child.poll() is None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass


def service_name(command) -> str:
    """``python serve.py`` -> ``serve``; ``python -m app.main`` -> ``main``; ``gunicorn ...`` -> ``gunicorn``."""
    program = Path(command[0]).name
    args = list(command[1:])
    if program.startswith("python") and args:
        if args[0] == "-m" and len(args) > 1:
            return args[1].rsplit(".", 1)[-1]
        if not args[0].startswith("-"):
            return Path(args[0]).stem
    return program


def recover_finished_runs(out: Path) -> int:
    """Finish the segment files of every run under ``out`` whose process has ended."""
    from ..record.rundir import host_name, run_is_dead
    from ..record.segments import recover_run

    written = 0
    for run_json in sorted((out / host_name()).glob("*/*/run.json")):
        if run_is_dead(run_json.parent):
            written += recover_run(run_json.parent)
    return written


def summary(out: Path, since_ns: int, recovered: int, received: bool = False) -> str:
    """What this run recorded, from the run.json files it left (``received``: the receiver says its own part)."""
    runs = written = dropped = samples = files = errors = 0
    for run_json in out.glob("*/*/*/run.json"):
        try:
            info = json.loads(run_json.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if info.get("started_ns", 0) < since_ns or info.get("role") == "received":  # the receiver says its part
            continue
        counters = info.get("counters", {})
        runs += info.get("role") == "service"
        written += counters.get("spans_written", 0)
        dropped += counters.get("spans_dropped", 0) + counters.get("spans_lost", 0)
        samples += counters.get("samples_written", 0)
        files += counters.get("files", 0)
        errors += counters.get("write_errors", 0)
    lines = [f"loadprobe: recorded {written:,} spans from {runs} process(es), {samples:,} device samples -> {out}"]
    if dropped or errors:
        lines.append(f"loadprobe: warning: {dropped:,} spans lost, {errors} write errors (see the counters in run.json)")
    if recovered:
        lines.append(f"loadprobe: finished {recovered} segment file(s) left by processes that did not stop cleanly")
    if not runs and not received:
        lines.append("loadprobe: no process recorded spans: add @probe / @request to the service "
                     "(see docs/recording.md)")
    return "\n".join(lines)
