"""The arrival-schedule options ``loadprobe load`` and ``loadprobe simulate`` share, and the schedule they make.

Usage::

    @click.command()
    @schedule_options
    def command(**options):
        offsets, mode, seed, tokens = build_schedule(**pick(options))
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import click
from click.core import ParameterSource

from .._errors import LoadprobeError

# Kept literal so that ``loadprobe --help`` does not load pyarrow (as in import_.py).
_PRESETS = ["azure-llm-2023", "mooncake"]
_UNITS = ["s", "ms", "us", "ns"]

SCHEDULE_OPTIONS = ("rate", "process", "peak_to_mean", "burst_rate", "on_s", "off_s", "replay", "speed", "preset",
                    "ts_col", "ts_unit", "ts_format", "duration", "requests", "seed")

_OPTIONS = [
    click.option("--rate", type=float, help="Requests per second: constant (alone), the mean of --poisson/--diurnal, "
                                            "or the rate between bursts of --bursty."),
    click.option("--poisson", "process", flag_value="poisson", help="Poisson arrivals at --rate."),
    click.option("--diurnal", "process", flag_value="diurnal", help="A day's curve compressed into --duration: "
                                                                    "Poisson with a rate that follows the hours."),
    click.option("--peak-to-mean", type=float, default=2.0, show_default=True, help="--diurnal: peak rate / mean rate."),
    click.option("--bursty", "process", flag_value="bursty", help="On/off bursts at --burst-rate (MMPP)."),
    click.option("--burst-rate", type=float, help="--bursty: requests per second during a burst."),
    click.option("--on-s", type=float, default=1.0, show_default=True, help="--bursty: mean burst length, seconds."),
    click.option("--off-s", type=float, default=9.0, show_default=True, help="--bursty: mean gap between bursts, seconds."),
    click.option("--replay", "--trace", "replay", metavar="SOURCE",
                 help="Replay the arrival times of a loadprobe data directory or a CSV/JSONL request log "
                      "(e.g. a public trace with --preset)."),
    click.option("--speed", type=float, default=1.0, show_default=True, help="--replay: play it this many times faster."),
    click.option("--preset", type=click.Choice(_PRESETS), help="--replay: column mapping of a public trace."),
    click.option("--ts-col", help="--replay: the log's start-time column (default: timestamp, ts or time)."),
    click.option("--ts-unit", type=click.Choice(_UNITS), help="--replay: unit of numeric timestamps."),
    click.option("--ts-format", help="--replay: strptime format of text timestamps that are not ISO-8601."),
    click.option("--duration", type=float, help="Seconds of arrivals [default: 10; --replay: the whole trace]."),
    click.option("--requests", type=int, help="At most this many requests."),
    click.option("--seed", type=int, help="Seed of the random schedules (default: a fresh one, printed)."),
]


def schedule_options(command):
    """Add the schedule options to a click command (they arrive as keyword arguments)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


_BELONGS_TO = {"replay": ["speed", "preset", "ts_col", "ts_unit", "ts_format"], "diurnal": ["peak_to_mean"],
               "bursty": ["burst_rate", "on_s", "off_s"]}


class Schedule(NamedTuple):
    offsets: object  # np.ndarray of seconds from the start; None in closed loop
    mode: str | None  # a one-line description
    seed: int | None  # the seed used
    tokens: tuple | None = None  # --replay: (tokens_in, tokens_out) of each arrival, -1 where the source has none


def build_schedule(*, rate, process, peak_to_mean, burst_rate, on_s, off_s, replay, speed, preset, ts_col, ts_unit,
                   ts_format, duration, requests, seed, other: str | None | bool = False,
                   service: str | None = None) -> Schedule:
    """The schedule the options ask for.

    ``other`` is ``loadprobe load``'s closed loop: ``"--concurrency"`` when chosen (then
    ``offsets`` is None), ``None`` when it could have been; ``False`` where there is none.
    ``service``: the recorded service to replay, where the data holds several.
    """
    from ..load import schedules

    ways = [name for name, given in ((f"--{process}", process), ("--replay", replay), (other, other)) if given]
    if len(ways) > 1:
        raise LoadprobeError(f"{' and '.join(ways)} are different ways to send; choose one")
    if rate is not None and (replay or other):
        raise LoadprobeError(f"--rate does not apply to {ways[0]}; leave it out")
    _refuse_strays(replay=replay is not None, diurnal=process == "diurnal", bursty=process == "bursty")
    if seed is None and process in ("poisson", "diurnal", "bursty"):
        import secrets

        seed = secrets.randbelow(2**31)
    if other:
        return Schedule(None, None, seed)
    if replay is not None:
        times, tokens_in, tokens_out = schedules.arrivals(replay, preset=preset, ts_col=ts_col, ts_unit=ts_unit,
                                                          ts_format=ts_format, tokens=True, service=service)
        offsets = schedules.replay(times, speed=speed, duration=duration, requests=requests)
        mode = f"replay of {Path(replay).name}" + (f" at {speed:g}x" if speed != 1 else "")
        return Schedule(offsets, mode, seed, (tokens_in[:len(offsets)], tokens_out[:len(offsets)]))
    if process == "bursty":
        if burst_rate is None:
            raise LoadprobeError("--bursty needs --burst-rate R (requests per second during a burst)")
        offsets = schedules.bursty(burst_rate, rate=rate or 0.0, on_s=on_s, off_s=off_s, duration=duration,
                            requests=requests, seed=seed)
        mode = f"bursty {burst_rate:g}/s for ~{on_s:g} s every ~{on_s + off_s:g} s"
        return Schedule(offsets, mode + (f", {rate:g}/s between" if rate else ""), seed)
    if rate is None:
        raise LoadprobeError("how fast? give --rate R (requests per second), --replay SOURCE or --concurrency N"
                             if other is None else "how fast? give --rate R (requests per second) or --trace SOURCE")
    if process == "poisson":
        offsets = schedules.poisson(rate, duration=duration, requests=requests, seed=seed)
    elif process == "diurnal":
        offsets = schedules.diurnal(rate, duration=duration, peak_to_mean=peak_to_mean, requests=requests, seed=seed)
    else:
        offsets = schedules.constant(rate, duration=duration, requests=requests)
    mode = f"{process or 'constant'} {rate:g}/s" + (f", peak {peak_to_mean:g}x mean" if process == "diurnal" else "")
    return Schedule(offsets, mode, seed)


def _refuse_strays(**active: bool) -> None:
    """An option of another way to send, given explicitly, is a mistake worth a line rather than silence."""
    ctx = click.get_current_context()
    for way, names in _BELONGS_TO.items():
        stray = [name for name in names if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
        if stray and not active[way]:
            options = ", ".join("--" + name.replace("_", "-") for name in stray)
            verb, them = ("apply", "them") if len(stray) > 1 else ("applies", "it")
            raise LoadprobeError(f"{options} only {verb} to --{way}; leave {them} out or add --{way}")
