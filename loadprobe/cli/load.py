"""``loadprobe load``: send requests to a URL on an arrival schedule (open loop) and report what happened."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.core import ParameterSource

from .._errors import LoadprobeError

# Kept literal so that ``loadprobe --help`` does not load pyarrow (as in import_.py).
_PRESETS = ["azure-llm-2023", "mooncake"]
_UNITS = ["s", "ms", "us", "ns"]


@click.command("load")
@click.argument("url")
@click.option("--rate", type=float, help="Requests per second: constant (alone), the mean of --poisson/--diurnal, "
                                          "the rate between bursts with --bursty.")
@click.option("--poisson", "process", flag_value="poisson", help="Poisson arrivals at --rate.")
@click.option("--diurnal", "process", flag_value="diurnal", help="A day's curve compressed into --duration: "
                                                                  "valley, peak, valley; mean --rate.")
@click.option("--peak-to-mean", type=float, default=2.0, show_default=True, help="--diurnal: peak rate / mean rate.")
@click.option("--bursty", "process", flag_value="bursty", help="On/off bursts at --burst-rate (MMPP).")
@click.option("--burst-rate", type=float, help="--bursty: requests per second during a burst.")
@click.option("--on-s", type=float, default=1.0, show_default=True, help="--bursty: mean burst length, seconds.")
@click.option("--off-s", type=float, default=9.0, show_default=True, help="--bursty: mean gap between bursts, seconds.")
@click.option("--replay", metavar="SOURCE", help="Replay arrival times of a loadprobe data directory or a "
                                                 "CSV/JSONL request log.")
@click.option("--speed", type=float, default=1.0, show_default=True, help="--replay: play it this many times faster.")
@click.option("--preset", type=click.Choice(_PRESETS), help="--replay: column mapping of a public trace.")
@click.option("--ts-col", help="--replay: the log's start-time column (default: timestamp, ts or time).")
@click.option("--ts-unit", type=click.Choice(_UNITS), help="--replay: unit of numeric timestamps.")
@click.option("--ts-format", help="--replay: strptime format of text timestamps that are not ISO-8601.")
@click.option("--concurrency", type=int, help="Closed loop instead: N workers sending back to back.")
@click.option("--duration", type=float, help="Seconds to send for [default: 10; --replay: the whole trace].")
@click.option("--requests", type=int, help="Send at most this many requests.")
@click.option("--seed", type=int, help="Seed of the random schedules (default: a fresh one, printed).")
@click.option("--method", help="HTTP method [default: GET, or POST with a body].")
@click.option("--body", help="Request body (text).")
@click.option("--body-file", multiple=True, type=click.Path(dir_okay=False),
              help="Request body read from this file; repeat it to send several bodies in turn.")
@click.option("--header", "headers", multiple=True, metavar="NAME:VALUE", help="Extra request header; repeatable.")
@click.option("--timeout", type=float, default=10.0, show_default=True,
              help="Seconds after its intended send time a request counts as timed out.")
@click.option("--connections", type=int, default=256, show_default=True, help="At most this many connections.")
@click.option("--record", metavar="DIR", type=click.Path(file_okay=False),
              help="Record the client's view of every request as loadprobe data in DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def load(url, rate, process, peak_to_mean, burst_rate, on_s, off_s, replay, speed, preset, ts_col, ts_unit,
         ts_format, concurrency, duration, requests, seed, method, body, body_file, headers, timeout, connections,
         record, as_json):
    """Send requests to URL at intended times and report lateness, errors and latency.

    Open loop: every request is sent at its scheduled time whether or not earlier ones
    were answered, and its latency counts from that time, so a server that falls behind
    shows growing latency (no coordinated omission). Each request carries a unique
    x-request-id header, "<run>-<n>".

    \b
    Examples:
        loadprobe load http://127.0.0.1:8000/ --rate 200 --duration 30
        loadprobe load http://127.0.0.1:8000/infer --poisson --rate 500 --method POST --body-file req.json
        loadprobe load http://127.0.0.1:8000/ --diurnal --rate 100 --peak-to-mean 3 --duration 600
        loadprobe load http://127.0.0.1:8000/ --bursty --burst-rate 1000 --on-s 0.5 --off-s 5 --duration 60
        loadprobe load http://127.0.0.1:8000/ --replay AzureLLMInferenceTrace_code.csv --speed 1.5
        loadprobe load http://127.0.0.1:8000/ --concurrency 16 --duration 30
    """
    from .. import load as lg

    if body is not None and body_file:
        raise LoadprobeError("give --body or --body-file, not both")
    payload = body.encode() if body is not None else [_read_body(f) for f in body_file] if body_file else b""
    method = method or ("POST" if payload else "GET")
    ways = [name for name, given in ((f"--{process}", process), ("--replay", replay),
                                     ("--concurrency", concurrency is not None)) if given]
    if len(ways) > 1:
        raise LoadprobeError(f"{' and '.join(ways)} are different ways to send; choose one")
    if rate is not None and (replay or concurrency is not None):
        raise LoadprobeError(f"--rate does not apply to {ways[0]}; leave it out")
    _refuse_strays(replay=replay is not None, diurnal=process == "diurnal", bursty=process == "bursty")
    if seed is None and process in ("poisson", "diurnal", "bursty"):
        import secrets

        seed = secrets.randbelow(2**31)
    offsets = None
    if concurrency is not None:
        mode = f"closed loop, concurrency {concurrency}"
    elif replay is not None:
        times = lg.arrivals(replay, preset=preset, ts_col=ts_col, ts_unit=ts_unit, ts_format=ts_format)
        offsets = lg.replay(times, speed=speed, duration=duration, requests=requests)
        mode = f"replay of {Path(replay).name}" + (f" at {speed:g}x" if speed != 1 else "")
    elif process == "bursty":
        if burst_rate is None:
            raise LoadprobeError("--bursty needs --burst-rate R (requests per second during a burst)")
        offsets = lg.bursty(burst_rate, rate=rate or 0.0, on_s=on_s, off_s=off_s, duration=duration,
                            requests=requests, seed=seed)
        mode = f"bursty {burst_rate:g}/s for ~{on_s:g} s every ~{on_s + off_s:g} s"
        if rate:
            mode += f", {rate:g}/s between"
    else:
        if rate is None:
            raise LoadprobeError("how fast? give --rate R (requests per second), --replay SOURCE or --concurrency N")
        if process == "poisson":
            offsets = lg.poisson(rate, duration=duration, requests=requests, seed=seed)
        elif process == "diurnal":
            offsets = lg.diurnal(rate, duration=duration, peak_to_mean=peak_to_mean, requests=requests, seed=seed)
        else:
            offsets = lg.constant(rate, duration=duration, requests=requests)
        mode = f"{process or 'constant'} {rate:g}/s"
        if process == "diurnal":
            mode += f", peak {peak_to_mean:g}x mean"
    report = lg.run(url, offsets, concurrency=concurrency, duration=duration, requests=requests, method=method,
                    body=payload, headers=headers, timeout=timeout, connections=connections, record=record,
                    mode=mode, seed=seed)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render())


_BELONGS_TO = {"replay": ["speed", "preset", "ts_col", "ts_unit", "ts_format"], "diurnal": ["peak_to_mean"],
               "bursty": ["burst_rate", "on_s", "off_s"]}


def _refuse_strays(**active: bool) -> None:
    """An option of another way to send, given explicitly, is a mistake worth a line rather than silence."""
    ctx = click.get_current_context()
    for way, names in _BELONGS_TO.items():
        stray = [name for name in names if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
        if stray and not active[way]:
            options = ", ".join("--" + name.replace("_", "-") for name in stray)
            verb, them = ("apply", "them") if len(stray) > 1 else ("applies", "it")
            raise LoadprobeError(f"{options} only {verb} to --{way}; leave {them} out or add --{way}")


def _read_body(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise LoadprobeError(f"--body-file {path}: cannot read it ({exc.strerror or exc}); "
                             "check the path and its permissions") from None
