"""``loadprobe demo``: a whole check-up of the sample vision service, on this machine, in a minute.

Usage::

    from loadprobe.demo import run_demo
    outputs = run_demo(seconds=60)          # {"data": ..., "portrait": ..., "client": ...}

Steps: build the sample's ONNX models (once, cached); start samples/vision on 127.0.0.1
under a recorder (spans and device samples into ``<out>/data``); drive it with a day's
traffic compressed into ``seconds`` plus a burst near the evening peak, open loop;
stop the server cleanly so its files are finished; analyse the recording (on the line-up
GPU's roofline), check the backbone's INT8 model against its FP32 one (``loadprobe
align``), recommend a plan with that verdict on the seeds' line-up (CPU, GPU, NPU) for a
production rate of ``PRODUCTION_X`` times what the host CPU alone carries -- a laptop's peak
is a rate its own CPU carries, where no accelerator decision arises -- replay the recorded
arrivals at that rate, times 1.5, through every plan (``loadprobe simulate``, service times drawn from the
recording), render the HTML report with all of it; print where every output is. The server
runs in its own process group and is stopped on every exit path, Ctrl-C included. Each run
writes a new timestamped folder: nothing is overwritten.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

import numpy as np

from ._errors import LoadprobeError
from ._files import inside, write_file
from .plan.targets import STRESS

SERVICE = "vision"
BURST_AT, BURST_S, BURST_X = 0.62, 0.08, 2.5  # burst start and length (fractions of the run), rate multiple
# The seeds' kinds of candidate -- the host CPU, a datacenter GPU, an inference NPU -- as devices clouds rent at
# published rates (the seeds' Ascend 310P has neither a published price nor a rate), so the plans compare on money.
LINEUP = "cpu,gpu:nvidia-l4,npu:aws-inferentia2"
ROOFLINE_DEVICE = "nvidia-l4"  # the line-up's GPU: each stage's intensity against its roofs
# The production rate the plan is sized for: this multiple of what the host CPU alone carries
# (as recorded, on this machine), so that whatever machine runs the demo, the plan has to
# decide which stages an accelerator takes.
PRODUCTION_X = 1.25
# 1.25x what the host CPU alone carries: more than the host can run by itself, so stages must move
# to accelerators; yet at the plan's own stress test (1.5x that again) the stages that stay on the
# host (decoding, encoding) leave its cores well short of saturation, so a plan can meet every
# target on the recorded host -- the CPU is the one engine the planner cannot buy more of.


def schedule(seconds: float, rate: float, *, seed: int = 0) -> np.ndarray:
    """Arrival offsets: a compressed day (peak 2x the mean mid-run) plus a 2.5x burst near 62%."""
    from .load.schedules import diurnal, poisson

    day = diurnal(rate, duration=seconds, peak_to_mean=2.0, seed=seed)
    start, length = BURST_AT * seconds, max(1.0, BURST_S * seconds)
    burst = start + poisson(BURST_X * rate, duration=length, seed=seed + 1)
    return np.sort(np.concatenate([day, burst[burst < seconds]]))


def run_demo(*, out: str | os.PathLike = "loadprobe-demo", seconds: float = 60.0, rate: float = 20.0,
             precision: str = "fp32", echo=print) -> dict[str, Path]:
    """Run the check-up; returns the paths of what it wrote. Raises LoadprobeError on failure, and
    KeyboardInterrupt on Ctrl-C or SIGTERM once it has said what was kept (nothing written is removed)."""
    try:
        from .samples.vision.images import inspection_jpegs
        from .samples.vision.model import ensure_models
    except ImportError as exc:
        raise _missing(exc) from None
    from .load.client import run

    run_dir = _new_run_dir(Path(out))
    data, client = run_dir / "data", run_dir / "client"
    echo("demo: building the vision sample's models (cached after the first run) ...")
    ensure_models()
    bodies = inspection_jpegs(48, seed=2)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    echo(f"demo: serving samples/vision on {url}, recording into {data}")
    server = _start_server(data, port, log=run_dir / "server.log", args=("--precision", precision))
    kept = (f"demo: interrupted; everything written so far is kept in {run_dir} (the service's recording in "
            f"{data.name}/, the client's in {client.name}/: loadprobe analyze {data})")
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C
    try:
        _wait_ready(server, url + "/health", timeout=90)
        offsets = schedule(seconds, rate)
        echo(f"demo: sending {len(offsets):,} requests over {seconds:g} s: a day compressed, "
             f"mean {rate:g}/s, peak ~{2 * rate:g}/s, a {BURST_X:g}x burst at {BURST_AT * seconds:.0f} s")
        report = run(url + "/inspect", offsets, method="POST", body=bodies, timeout=30.0, record=str(client),
                     mode="demo: compressed day + burst")
        echo(report.render())
        if report.interrupted:  # the load generator reported what finished; the demo stops here too
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        echo(kept)
        raise
    finally:
        _stop_server(server)  # before the analysis: a stopped recorder has finished its files and final counters
        signal.signal(signal.SIGTERM, previous)
    try:
        return analyse(data, run_dir, echo=echo) | {"data": data, "client": client}
    except KeyboardInterrupt:
        echo(kept)
        raise


LLM_SERVICE = "llm"
LLM_PROMPT, LLM_OUTPUT = "32:256", "16:128"  # tokens per request, drawn uniformly (seeded)


def run_llm_demo(*, out: str | os.PathLike = "loadprobe-demo", seconds: float = 30.0, rate: float = 2.0,
                 echo=print) -> dict[str, Path]:
    """The LLM sample end to end: its continuous-batching engine served under a recorder, driven by
    ``loadprobe load --openai`` (Poisson arrivals, prompts and outputs of mixed lengths, its /metrics
    scraped), both sides analysed together into the portrait's LLM section and the HTML report.
    Returns the paths of what it wrote; errors and Ctrl-C as ``run_demo``."""
    try:
        import fastapi  # noqa: F401 - the sample's server needs it (and uvicorn)
    except ImportError as exc:
        raise _missing(exc) from None
    from .load import openai
    from .load.client import run
    from .load.schedules import poisson
    from .record.scrape import sources

    run_dir = _new_run_dir(Path(out))
    data, client = run_dir / "data", run_dir / "client"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    echo(f"demo: serving samples/llm (continuous batching, OpenAI-compatible) on {url}, recording into {data}")
    server = _start_server(data, port, log=run_dir / "server.log", module="loadprobe.samples.llm.serve",
                           service=LLM_SERVICE)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        _wait_ready(server, url + "/health", timeout=90)
        offsets = poisson(rate, duration=seconds, seed=0)
        workload = openai.prepare(url, openai.lengths("--prompt-tokens", LLM_PROMPT, len(offsets), seed=1),
                                  openai.lengths("--output-tokens", LLM_OUTPUT, len(offsets), seed=2), timeout=60)
        echo(f"demo: streaming {len(offsets):,} completions over {seconds:g} s (Poisson, mean {rate:g}/s), prompts "
             f"of {LLM_PROMPT} tokens, outputs of {LLM_OUTPUT}")
        report = run(workload.url, offsets, openai=workload, timeout=300.0, record=str(client),
                     mode="demo: Poisson", scrape=sources([url + "/metrics"], 0.5))
        echo(report.render())
        if report.interrupted:
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        echo(f"demo: interrupted; everything written so far is kept in {run_dir}")
        raise
    finally:
        _stop_server(server)
        signal.signal(signal.SIGTERM, previous)
    from .analysis.run import analyze
    from .reports.summary import render

    portrait = analyze([str(data), str(client)], service=LLM_SERVICE)
    report_dir = run_dir / "report"
    outputs = {"data": data, "client": client, "portrait": portrait.save(report_dir / "portrait.json")}
    echo(render(portrait))
    outputs["report"] = _html(portrait, report_dir, {})
    echo("\ndemo: outputs")
    for name, path in outputs.items():
        echo(f"  {name:<10} {path}")
    return outputs


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _missing(exc: ImportError) -> LoadprobeError:
    return LoadprobeError(f"the demo needs the sample's dependencies ({exc.name} is missing): "
                          "run pip install 'loadprobe[demo]'")


def analyse(data: Path, run_dir: Path, *, echo=print) -> dict[str, Path]:
    """Every analysis step that exists, on the recording; returns the outputs' paths."""
    from .analysis.run import analyze
    from .reports.summary import render

    portrait = analyze([str(data)], device=ROOFLINE_DEVICE)
    report = run_dir / "report"
    outputs = {"portrait": portrait.save(report / "portrait.json")}
    echo(render(portrait))
    outputs.update(_align(report, echo))
    outputs.update(_recommend(portrait, report, echo, outputs.get("align")))
    client = run_dir / "client"  # the load generator's own record: the requests it sent, nothing else
    outputs.update(_simulate(client if client.exists() else data, data, portrait, report, outputs["plans"],
                             production_speed(portrait), echo))
    outputs["report"] = _html(portrait, report, outputs)
    echo("\ndemo: outputs")
    for name, path in {"recording": data, **outputs}.items():
        echo(f"  {name:<10} {path}")
    return outputs


def _html(portrait, report: Path, outputs: dict) -> Path:
    """The HTML load portrait, with the plan just made (its tables and pipeline.yaml) where there is one."""
    import json

    from .reports.html import render_report, write_html

    def read(name):
        return outputs[name].read_text(encoding="utf-8") if name in outputs else None

    path = report / "portrait.html"
    plans, simulation = read("plans"), read("simulation")
    write_html(path, render_report(portrait, plans=plans and json.loads(plans), pipeline_yaml=read("pipeline"),
                                   simulation=simulation and json.loads(simulation)))
    return path


def production_rate(portrait) -> tuple[float, str]:
    """The rate the demo's plan is sized for, ``PRODUCTION_X`` times what the host CPU alone carries
    (never below the recorded peak), and why."""
    from .plan.context import host_cpu_capacity

    if portrait.traffic is None or not portrait.traffic.peak_rps:
        raise LoadprobeError("the demo's recording has no request rate: the server answered no request")
    peak = portrait.traffic.peak_rps
    capacity = host_cpu_capacity(portrait)
    if capacity is None:
        return peak, "the recorded peak (no CPU time was recorded to size the host from)"
    rps, how = capacity
    rate = float(max(round(PRODUCTION_X * rps), math.ceil(peak)))
    return rate, (f"the demo's production rate: {PRODUCTION_X}x the {rps:.3g} req/s that the host CPU alone carries "
                  f"({how}), so the plan must place stages on accelerators; the recorded peak was {peak:.3g} req/s")


def production_speed(portrait) -> float:
    """How much faster than recorded the simulation replays: the production rate, times the seeds' 1.5x."""
    return production_rate(portrait)[0] / portrait.traffic.peak_rps * STRESS


def _simulate(sent: Path, data: Path, portrait, report: Path, plans: Path, speed: float, echo) -> dict[str, Path]:
    """Every plan of plans.json under the requests ``sent``, ``speed`` times faster, with the service times
    recorded in ``data``."""
    import json

    from .load.schedules import arrivals, replay
    from .simulator.compare import planned_rent, read_plans, simulate_plans

    offsets = replay(arrivals(str(sent)), speed=speed)
    # one run, said as one: its peak is the stress rate, its mean (what "done/s" is near) much lower
    peak, mean = portrait.traffic.peak_rps * speed, len(offsets) / max(float(offsets[-1]), 1e-9)
    described = (f"the recorded requests replayed {speed:.3g}x faster, so that their peak is {STRESS:g}x the "
                 f"production rate of {production_rate(portrait)[0]:.0f} req/s: {peak:.0f} req/s at the peak, "
                 f"{mean:.0f} req/s on average")
    comparison = simulate_plans(read_plans(plans), offsets, source=str(plans), data=str(data), portrait=portrait,
                                arrivals=described, rent=planned_rent(plans))
    echo("\n" + comparison.render())
    path = report / "simulation.json"
    write_file(path, json.dumps(comparison.to_dict(), indent=2, allow_nan=False) + "\n")
    return {"simulation": path}


def _align(report: Path, echo) -> dict[str, Path]:
    """The backbone's INT8 check: its FP32 and INT8 models captured on the same images, aligned."""
    try:
        from .instrumentation.onnxruntime import capture
        from .samples.vision.model import calibration_batch, ensure_models
    except ImportError:  # analysing without the sample's dependencies: no check, the plan stays FP16
        return {}
    from .align.compare import align
    from .align.document import write_align
    from .align.document import render

    fp32, int8 = ensure_models()
    images = calibration_batch(16, seed=5)  # not the images the INT8 model was calibrated on (seed 11)
    baseline = capture(fp32, images, out=report / "capture-fp32.npz")
    candidate = capture(int8, images, out=report / "capture-int8.npz")
    doc = align(baseline, candidate, stage="backbone")
    echo("\n" + render(doc))
    return {"align": write_align(doc, report / "align.json")}


def _recommend(portrait, report: Path, echo, align: Path | None = None) -> dict[str, Path]:
    """The plan for the recorded load on ``LINEUP`` (the host CPU, an L4, an Inferentia2), sized for the
    production rate, with the backbone's precision from its INT8 check."""
    import json

    from .plan.constraints import Constraints
    from .pipeline.files import save
    from .plan.files import plan_dict, render
    from .plan.planner import recommend

    rate, why = production_rate(portrait)
    constraints = Constraints.parse(engines=LINEUP, min_rps=rate, align=[align] if align else ())
    plan = recommend(portrait, constraints, rate_why=why)
    echo("\n" + render(plan))
    pipeline = save(plan.to_pipeline(), report / "pipeline.yaml")
    plans = report / "plans.json"
    write_file(plans, json.dumps(plan_dict(plan), indent=2, allow_nan=False) + "\n")
    return {"pipeline": pipeline, "plans": plans}


def _new_run_dir(out: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        run_dir = inside(out, stamp if n == 0 else f"{stamp}-{n}")
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            continue
        except OSError as exc:
            raise LoadprobeError(f"{out}: cannot create the demo's output folder ({exc.strerror}); "
                                 "give a writable --output") from None
    raise LoadprobeError(f"{out}: too many demo runs this second; try again")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(data: Path, port: int, *, log: Path, module: str = "loadprobe.samples.vision.serve",
                  service: str = SERVICE, args=()) -> subprocess.Popen:
    # ``python -m`` puts its working directory first on sys.path: from a clone's root the source
    # folder ./loadprobe would shadow the installed package (whose loadprobe.samples lives
    # elsewhere). So the server starts in the run's own fresh folder, with PYTHONSAFEPATH too.
    env = dict(os.environ, LOADPROBE_DIR=str(data.resolve()), LOADPROBE_SERVICE=service, PYTHONSAFEPATH="1")
    command = [sys.executable, "-m", module, "--port", str(port), *args]
    # Its own process group: a Ctrl-C in the terminal reaches us, and we stop the server in order.
    # Its output goes to a file: a pipe nobody reads would block the server once full.
    with open(log, "wb") as out:
        server = subprocess.Popen(command, env=env, cwd=log.parent.resolve(), start_new_session=True, stdout=out,
                                  stderr=subprocess.STDOUT)
    server.log = log
    return server


def _wait_ready(server: subprocess.Popen, health: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            err = server.log.read_text(errors="replace").strip().splitlines()
            raise LoadprobeError(f"the sample server exited with code {server.returncode} before serving: "
                                 f"{err[-1] if err else 'no message'}; see {server.log}")
        try:
            with urlopen(health, timeout=2) as response:
                if response.status == 200:
                    return
        except (URLError, OSError):
            time.sleep(0.2)
    raise LoadprobeError(f"the sample server did not answer {health} within {timeout:g} s")


def _stop_server(server: subprocess.Popen) -> None:
    """SIGINT (uvicorn shuts down, the recorder finishes its files), then SIGKILL if it hangs.

    A second Ctrl-C while waiting skips to SIGKILL: the server never outlives the demo.
    """
    try:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(30)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, ProcessLookupError):
        pass
    finally:
        if server.poll() is None:
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait(10)
