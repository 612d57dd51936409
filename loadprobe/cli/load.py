"""``loadprobe load``: send requests to a URL on an arrival schedule (open loop) and report what happened."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import click

from .._errors import LoadprobeError
from ._schedule import build_schedule, schedule_options
from ._types import Seconds


@click.command("load")
@click.argument("url")
@schedule_options
@click.option("--concurrency", type=int, help="Closed loop instead: N workers sending back to back.")
@click.option("--method", help="HTTP method [default: GET, or POST with a body].")
@click.option("--body", help="Request body (text).")
@click.option("--body-file", multiple=True, type=click.Path(dir_okay=False),
              help="Request body read from this file; repeat it to send several bodies in turn.")
@click.option("--header", "headers", multiple=True, metavar="NAME:VALUE", help="Extra request header; repeatable.")
@click.option("--timeout", type=float,
              help="Seconds after its intended send time a request counts as timed out [default: 10; --openai: 300].")
@click.option("--openai", is_flag=True,
              help="URL is an OpenAI-compatible server (or its /v1/completions or /v1/chat/completions): stream "
                   "completions and time each one's first token and every later chunk.")
@click.option("--model", help="--openai: the model to ask for [default: the first the server lists].")
@click.option("--prompt-tokens", metavar="N|LO:HI",
              help="--openai: prompt tokens per request, or a range drawn uniformly [default: 256; --replay: the "
                   "trace's, where it has them].")
@click.option("--output-tokens", metavar="N|LO:HI",
              help="--openai: output tokens per request (max_tokens, with ignore_eos where the server takes it) "
                   "[default: 64; --replay: the trace's].")
@click.option("--connections", type=int, default=256, show_default=True, help="At most this many connections.")
@click.option("--record", metavar="DIR", type=click.Path(file_okay=False),
              help="Record the client's view of every request as loadprobe data in DIR.")
@click.option("--scrape", multiple=True, metavar="URL[,URL...]",
              help="With --record: sample these Prometheus endpoints (the server's /metrics) into the recording.")
@click.option("--every", "scrape_every", default="1s", show_default=True, type=Seconds(minimum=0.05),
              help="Seconds between scrapes of --scrape.")
@click.option("--max-failed", type=click.FloatRange(0, 1), default=0.01, show_default=True,
              help="Exit 1 when more than this share of the finished requests failed (errors, timeouts, 4xx/5xx).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def load(url, concurrency, method, body, body_file, headers, timeout, openai, model, prompt_tokens, output_tokens,
         connections, record, scrape, scrape_every, max_failed, as_json, **schedule):
    """Send requests to URL at intended times and report lateness, errors and latency.

    Open loop: every request is sent at its scheduled time whether or not earlier ones
    were answered, and its latency counts from that time, so a server that falls behind
    shows growing latency (no coordinated omission). Each request carries a unique
    x-request-id header, "<run>-<n>".

    \b
    It exits 1 when more than --max-failed of the requests failed, and 130 on Ctrl-C, after
    printing what was sent and kept (with --record, every finished request is recorded).

    \b
    Examples:
        loadprobe load http://127.0.0.1:8000/ --rate 200 --duration 30
        loadprobe load http://127.0.0.1:8000/infer --poisson --rate 500 --method POST --body-file req.json
        loadprobe load http://127.0.0.1:8000/ --diurnal --rate 100 --peak-to-mean 3 --duration 600
        loadprobe load http://127.0.0.1:8000/ --bursty --burst-rate 1000 --on-s 0.5 --off-s 5 --duration 60
        loadprobe load http://127.0.0.1:8000/ --replay AzureLLMInferenceTrace_code.csv --speed 1.5
        loadprobe load http://127.0.0.1:8000/ --concurrency 16 --duration 30
        loadprobe load http://127.0.0.1:8000 --openai --rate 2 --duration 60 --prompt-tokens 64:512 \\
            --output-tokens 128 --record client/
        loadprobe load http://127.0.0.1:8000 --openai --replay trace.csv --preset azure-llm-2023 --speed 0.1
    """
    from ..load.client import run
    from ..record.scrape import sources as scrape_sources

    if body is not None and body_file:
        raise LoadprobeError("give --body or --body-file, not both")
    if not openai:
        given = [name for name, value in (("--model", model), ("--prompt-tokens", prompt_tokens),
                                          ("--output-tokens", output_tokens)) if value is not None]
        if given:
            verb, them = ("apply", "them") if len(given) > 1 else ("applies", "it")
            raise LoadprobeError(f"{', '.join(given)} only {verb} to --openai; add --openai or leave {them} out")
    elif body is not None or body_file or method:
        raise LoadprobeError("--openai makes each request's body (--prompt-tokens, --output-tokens); leave out "
                             "--body, --body-file and --method")
    payload = body.encode() if body is not None else [_read_body(f) for f in body_file] if body_file else b""
    method = method or ("POST" if payload else "GET")
    offsets, mode, seed, tokens = build_schedule(**schedule,
                                                 other="--concurrency" if concurrency is not None else None)
    if concurrency is not None:
        mode = f"closed loop, concurrency {concurrency}"
    duration, requests = schedule["duration"], schedule["requests"]
    workload = None
    if openai:
        from ..load.openai import prepare

        count = len(offsets) if offsets is not None else requests or 10_000
        asked_in, asked_out = _asked_lengths(prompt_tokens, output_tokens, count, seed, tokens)
        timeout = 300.0 if timeout is None else timeout
        workload = prepare(url, asked_in, asked_out, model=model, headers=headers, timeout=timeout)
        url, mode = workload.url, f"{mode}, OpenAI {workload.kind} of {workload.model!r}"
    timeout = 10.0 if timeout is None else timeout
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops a run as Ctrl-C does
    try:
        report = run(url, offsets, concurrency=concurrency, duration=duration, requests=requests, method=method,
                     body=payload, headers=headers, timeout=timeout, connections=connections, record=record,
                     mode=mode, seed=seed, scrape=scrape_sources(scrape, scrape_every), openai=workload)
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render())
    if report.interrupted:
        kept = f"; every request that finished is recorded in {record}" if record else ""
        click.echo(f"loadprobe: interrupted after {report.sent:,} requests were sent{kept}", err=True)
        raise SystemExit(130)
    failure = report.failure(max_failed)
    if failure:  # the summary above says what happened; the exit status tells a script
        click.echo(f"loadprobe: error: {failure}", err=True)
        raise SystemExit(1)


def _asked_lengths(prompt_tokens, output_tokens, count: int, seed, tokens):
    """Prompt and output tokens of each request: the options', else a replayed trace's, else the defaults."""
    import numpy as np

    from ..load.openai import lengths

    asked = []
    for option, given, default, column in (("--prompt-tokens", prompt_tokens, "256", 0),
                                           ("--output-tokens", output_tokens, "64", 1)):
        drawn = lengths(option, given or default, count, None if seed is None else seed + column)
        if given is None and tokens is not None:  # the trace's own lengths, where it has them
            traced = np.asarray(tokens[column][:count])
            drawn = np.where(traced >= 1, traced, drawn)
        asked.append(np.maximum(drawn, 1))
    return asked


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _read_body(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise LoadprobeError(f"--body-file {path}: cannot read it ({exc.strerror or exc}); "
                             "check the path and its permissions") from None
