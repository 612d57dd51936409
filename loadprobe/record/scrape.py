"""Prometheus endpoints scraped into the recording's samples: an engine's own view of its load.

Inference engines publish what no span shows -- vLLM's running and waiting requests and KV-cache
use (``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``),
llama.cpp's ``llamacpp:requests_processing`` -- on a ``/metrics`` page in the Prometheus text
format. ``ScrapeSource`` reads such a page every ``interval_s`` and turns it into samples of the
device ``scrape:<host:port>``, one metric per series, named with its labels:

- a gauge (or an untyped series) as it is: ``vllm:num_requests_running{model_name="m"}``;
- a counter as its rate over the interval: ``vllm:generation_tokens_total:per_s{model_name="m"}``;
- a histogram as what the interval's observations did: ``...:mean``, ``...:p50``, ``...:p90``,
  ``...:p99`` (interpolated within the buckets, as Prometheus' ``histogram_quantile``) and
  ``...:count_per_s``; intervals without an observation leave no sample;
- a summary's quantiles as gauges, its sum and count as ``:mean`` and ``:count_per_s``.

A counter that went down (the engine restarted) starts afresh without a sample. A page that
cannot be read is an error the sampler counts and warns about once; scraping goes on.

Usage::

    from loadprobe.record.scrape import ScrapeSource, parse

    source = ScrapeSource("http://127.0.0.1:8000/metrics", interval_s=1.0)
    readings = source.read()     # [(device, metric, value), ...], once the interval has passed
    families = parse(text)       # {name: Family(type, samples)}
"""

from __future__ import annotations

import http.client
import logging
import math
import re
import time
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import urlsplit

log = logging.getLogger("loadprobe")

QUANTILES = (0.5, 0.9, 0.99)
MAX_PAGE_BYTES = 8 << 20  # an engine's page is ~100 KB; past this it is not a metrics page to read every second
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass
class Family:
    """One metric family of a page: its type and its samples ``(name, labels, value)``."""

    type: str = "untyped"
    samples: list = field(default_factory=list)


def parse(text: str) -> dict[str, Family]:
    """The Prometheus text exposition format (0.0.4) as ``{family name: Family}``; lines it cannot
    read are left out (a page is the engine's, not the user's input)."""
    families: dict[str, Family] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        exemplar = line.find(" # {")  # OpenMetrics: "name{...} value [ts] # {labels} value [ts]"
        if exemplar > 0:
            line = line[:exemplar]
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), _labels(match.group(2) or ""), _number(match.group(3))
        if value is None or labels is None or name.endswith("_created"):  # _created: a start time, not load
            continue
        family = _family_of(name, types)
        families.setdefault(family, Family(types.get(family, "untyped"))).samples.append((name, labels, value))
    return families


def _family_of(name: str, types: dict) -> str:
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name


def _labels(text: str) -> tuple | None:
    if not text:
        return ()
    body, labels, at = text[1:-1], [], 0
    while at < len(body):
        match = _LABEL.match(body, at)
        if not match:
            return None
        value = match.group(2).replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")
        labels.append((match.group(1), value))
        at = match.end()
    return tuple(sorted(labels))


def _number(text: str) -> float | None:
    try:
        return float(text)  # NaN, +Inf and -Inf are spelled as Python reads them
    except ValueError:
        return None


def series_name(name: str, labels: tuple, what: str = "") -> str:
    """``vllm:x`` + ``(("model_name", "m"),)`` + ``:p50`` -> ``vllm:x:p50{model_name="m"}`` (values escaped as on the page)."""
    label_text = ",".join(f'{key}="{_escaped(value)}"' for key, value in labels)
    return f"{name}{what}{{{label_text}}}" if labels else f"{name}{what}"


def sources(given, interval_s: float = 1.0) -> list["ScrapeSource"]:
    """A source per endpoint of ``--scrape`` options (each a URL or URLs joined by commas)."""
    return [ScrapeSource(url.strip(), interval_s=interval_s) for option in given for url in option.split(",")
            if url.strip()]


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class ScrapeSource:
    """A Prometheus endpoint as a sampler source (``samplers.Sampler`` calls ``read`` each tick)."""

    def __init__(self, url: str, interval_s: float = 1.0, timeout_s: float | None = None) -> None:
        self.url = url if "://" in url else f"http://{url}"
        parts = urlsplit(self.url)
        # Two endpoints of one host:port (two paths) stay two devices; the usual /metrics is left out of the name.
        self.device = "scrape:" + (parts.netloc or self.url) + (parts.path if parts.path not in ("", "/metrics") else "")
        self.name = f"prometheus {self.url}"  # run.json's samplers: one entry per endpoint
        self.interval_s = interval_s
        self.timeout_s = timeout_s if timeout_s is not None else min(max(interval_s, 0.5), 2.0)
        self._due = 0.0
        self._last: tuple[float, dict] | None = None  # (monotonic time, cumulative values) of the last page
        # Live in run.json's samplers (the recorder keeps this dict and writes it with its counters).
        self.status = {"available": True, "url": self.url, "pages": 0, "failed_reads": 0, "last_error": None}

    reads_at_edges = True  # samplers.Sampler reads it when it starts and when it stops, whatever the interval

    def availability(self) -> dict:
        return self.status

    def force_next(self) -> None:
        """Read the page at the next call, however soon (the last reading, at stop)."""
        self._due = 0.0

    def read(self) -> list[tuple[str, str, float]]:
        """The samples of the page now, once ``interval_s`` has passed since the last; [] otherwise. A page
        that cannot be read is counted in ``status`` and warned about once per endpoint and cause."""
        now = time.monotonic()
        if now < self._due:
            return []
        self._due = now + self.interval_s * 0.95  # a tick that comes a little early still scrapes
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                data = response.read(MAX_PAGE_BYTES + 1)
            if len(data) > MAX_PAGE_BYTES:
                raise ValueError(f"a page over {MAX_PAGE_BYTES >> 20} MiB")
            families = parse(data.decode("utf-8", "replace"))
        except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timed out, not HTTP, not text
            self._failed(exc)
            return []
        self.status["pages"] += 1
        return self.readings(families, now)

    def _failed(self, exc: Exception) -> None:
        self.status["failed_reads"] += 1
        why = f"{type(exc).__name__}: {exc}"
        if self.status["last_error"] is None or self.status["last_error"].split(":")[0] != why.split(":")[0]:
            log.warning("loadprobe: cannot read %s (%s); scraping goes on", self.url, why)
        self.status["last_error"] = why

    def readings(self, families: dict[str, Family], now: float) -> list[tuple[str, str, float]]:
        """The samples of one page read at ``now`` (monotonic s), against the page before it."""
        out, cumulative = [], {}
        for family, content in families.items():
            kind = content.type
            for name, labels, value in content.samples:
                if kind in ("gauge", "untyped") or (kind == "summary" and name == family):
                    if math.isfinite(value):
                        out.append((series_name(name, labels), value))
                else:
                    cumulative[(name, labels)] = value
        if self._last is not None:
            elapsed = now - self._last[0]
            if elapsed > 0:
                out += self._interval(families, cumulative, self._last[1], elapsed)
        self._last = (now, cumulative)
        return [(self.device, metric, value) for metric, value in out]

    def _interval(self, families, now_values: dict, before: dict, elapsed: float) -> list[tuple[str, float]]:
        out = []
        for family, content in families.items():
            if content.type == "counter":
                for name, labels, value in content.samples:
                    delta = _delta(now_values, before, (name, labels))
                    if delta is not None:
                        out.append((series_name(name, labels, ":per_s"), delta / elapsed))
            elif content.type in ("histogram", "summary"):
                out += _distribution(family, content, now_values, before, elapsed)
        return out


def _delta(now_values: dict, before: dict, key) -> float | None:
    """What a cumulative series gained since the page before (from 0 if it is new: engines create a
    labelled series on its first use)."""
    if key not in now_values:
        return None
    delta = now_values[key] - before.get(key, 0.0)
    return delta if delta >= 0 and math.isfinite(delta) else None  # went down: the engine restarted


def _distribution(family: str, content: Family, now_values: dict, before: dict, elapsed: float) -> list:
    """A histogram's or summary's observations in the interval: mean, rate and (histogram) quantiles."""
    series: dict[tuple, dict] = {}  # labels without "le" -> {"sum", "count", "buckets": [(le, cumulative delta)]}
    reset = set()  # label sets a series of which went down (the engine restarted): no figure this interval
    for name, labels, _ in content.samples:
        rest = tuple(item for item in labels if item[0] != "le") if name == family + "_bucket" else labels
        delta = _delta(now_values, before, (name, labels))
        if delta is None:
            if (name, labels) in now_values:
                reset.add(rest)
            continue
        if name == family + "_bucket":
            bound = dict(labels).get("le")
            upper = _number(bound) if bound is not None else None
            if upper is not None:
                series.setdefault(rest, {}).setdefault("buckets", []).append((upper, delta))
        elif name == family + "_sum":
            series.setdefault(labels, {})["sum"] = delta
        elif name == family + "_count":
            series.setdefault(labels, {})["count"] = delta
    out = []
    for labels, figures in series.items():
        count = figures.get("count")
        if not count or labels in reset:
            continue  # no observation this interval: nothing to say
        out.append((series_name(family, labels, ":count_per_s"), count / elapsed))
        if "sum" in figures:
            out.append((series_name(family, labels, ":mean"), figures["sum"] / count))
        buckets = sorted(figures.get("buckets", ()))
        for q in QUANTILES if buckets else ():
            value = bucket_quantile(q, buckets)
            if value is not None:
                out.append((series_name(family, labels, f":p{round(q * 100):d}"), value))
    return out


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of observations in cumulative ``buckets`` [(upper bound, count)], sorted:
    linear within the bucket it falls in (from 0 for the first); the last finite bound past +Inf."""
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(upper):
                return lower
            inside = cumulative - below
            return upper if inside <= 0 else lower + (upper - lower) * (rank - below) / inside
        lower, below = upper, cumulative
    return lower
